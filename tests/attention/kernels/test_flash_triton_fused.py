"""The fused Flash-CoDA backward (``flash_triton.BACKWARD = "fused"``: ``triton_bwd._bwd_kernel``, each tile once,
dq and dnq by atomic adds) under the Triton interpreter: the same gradients as the split kernels (``_dkdv_kernel`` +
``_dq_kernel``) and the float64 reference, on the cases ``test_flash_triton`` runs the split ones on (masks, causal,
dropout, shared / unshared N, centring, every activation, odd sizes, float32); the choice of backward and its
errors; the autotune setup a GPU would use. Under the interpreter the (8, 8) blocks take 4 × 4 "lanes" and two
groups of "warps" over features, so each "thread" holds a 2 × 2 block of pairs and every axis of the sign tiles has
more than one index."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from coda_exp.attention.flash_spec import FlashParams
from coda_exp.attention.kernels import flash_triton as ft
from tests.attention.kernels.test_flash_triton import (
    CASES,
    FN_PAIRS,
    TOL64,
    _compare,
    _inputs,
    _masks,
    _query_mask,
)


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("CODA_FLASH_BACKWARD", raising=False)
    monkeypatch.setattr(ft, "BACKWARD", "fused")


def _both(q, k, v, nq, nk, mask, query_mask, params, dout):
    """(split, fused) gradients of the same call."""
    grads = {}
    for kind in ft.BACKWARDS:
        ft.BACKWARD = kind
        grads[kind] = ft.backward(q, k, v, nq, nk, mask, query_mask, params, dout)
    ft.BACKWARD = "fused"
    return grads["split"], grads["fused"]


@pytest.mark.parametrize("name", list(CASES))
def test_cases_match_the_reference_and_the_split_kernels(name, monkeypatch):
    """test_flash_triton's cases (masks, query masks, causal with Lq != Lk, dropout, shared N, length 1, dims that
    are not powers of two), the feature chunks prefetched (PF 1) or not in turn; two of them also against the split
    kernels' gradients directly (to 1e-12: the same sums in another order)."""
    monkeypatch.setattr(ft, "INTERPRET_BLOCK", (*ft.INTERPRET_BLOCK[:3], list(CASES).index(name) % 2))
    b, h, lq, lk, de, dn, dv, mask_kind, with_query, overrides = CASES[name]
    params = FlashParams(**{"alpha": 0.6, "beta": 0.3, "gate": 2.0, "e_fn": "tanh", "n_fn": "sigmoid",
                            **overrides})
    q, k, v, nq, nk = _inputs(b, h, lq, lk, de, dn, dv, shared=params.shared_n, seed=len(name))
    mask, query_mask = _masks(mask_kind, b, h, lq, lk), _query_mask(b, h, lq) if with_query else None
    _compare(q, k, v, nq, nk, mask, query_mask, params)
    if name not in ("causal-wide+dropout", "shared+dropout"):  # both match the reference; two cases side by side
        return
    dout = torch.randn(b, h, lq, dv, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for name_, a, c in zip(("dq", "dk", "dv", "dnq", "dnk"), *_both(q, k, v, nq, nk, mask, query_mask, params, dout)):
        assert (a is None) == (c is None) == (params.shared_n and name_ in ("dnq", "dnk"))
        if a is not None:
            torch.testing.assert_close(c, a, rtol=1e-12, atol=1e-13, msg=lambda m, n=name_: f"{n}: {m}")


@pytest.mark.parametrize("e_fn,n_fn", FN_PAIRS)
def test_functions(e_fn, n_fn):
    """Every f_E x f_N of Table 9 (gate 2 and 1 in turn), key padding, Lk across two key blocks."""
    index = FN_PAIRS.index((e_fn, n_fn))
    q, k, v, nq, nk = _inputs(1, 2, 6, 11, 3, 4, 5, seed=index)
    params = FlashParams(alpha=0.9, beta=0.35, gate=2.0 if index % 2 == 0 else 1.0, e_fn=e_fn, n_fn=n_fn)
    _compare(q, k, v, nq, nk, _masks("keys", 1, 2, 6, 11), None, params)


@pytest.mark.parametrize("over,center_e,center_n,causal,dropout,masked", [
    ("row", True, True, True, 0.3, True), ("slice", False, True, True, 0.3, False),
    ("slice", True, False, False, 0.0, True)])
def test_centring(over, center_e, center_n, causal, dropout, masked):
    """Centred E and / or D (row or slice means): the kernel subtracts the gradients' means per tile."""
    params = FlashParams(0.6, 0.4, 1.0 if center_n else 2.0, "tanh", "sigmoid", causal=causal, dropout_p=dropout,
                         seed=7, center_e=center_e, center_n=center_n, center_over=over)
    q, k, v, nq, nk = _inputs(2, 2, 9, 11, 5, 3, 4, seed=3)
    mask = _masks("keys", 2, 2, 9, 11) if masked else None
    _compare(q, k, v, nq, nk, mask, _query_mask(2, 2, 9) if masked else None, params)


def test_float32():
    """float32 in float32: the atomics' buffers too (cast at the end on the host)."""
    q, k, v, nq, nk = _inputs(2, 2, 11, 14, 6, 5, 4, dtype=torch.float32, seed=5)
    params = FlashParams(alpha=0.6, beta=0.3, gate=2.0, e_fn="tanh", n_fn="arctan", causal=True, dropout_p=0.1,
                         seed=4)
    _compare(q, k, v, nq, nk, _masks("keys", 2, 2, 11, 14), _query_mask(2, 2, 11), params,
             tol={"rtol": 1e-4, "atol": 2e-5})


def test_ties_have_no_l1_gradient():
    """q = k = nq = nk: |x_i - x_i| = 0 on the diagonal, whose sign is 0 on each side (not only in dq + dk)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 2, 9, 4, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 2, 9, 3, generator=gen, dtype=torch.float64)
    params = FlashParams(alpha=0.5, beta=0.7, gate=2.0, e_fn="tanh", n_fn="arctan", causal=True, dropout_p=0.2,
                         seed=77, shared_n=True)
    dout = torch.randn(2, 2, 9, 3, generator=gen, dtype=torch.float64)
    split, fused = _both(x, x, v, None, None, None, None, params, dout)
    for a, c in zip(split[:3], fused[:3]):
        torch.testing.assert_close(c, a, **TOL64)


def test_the_choice_of_backward(monkeypatch):
    """``BACKWARD`` first, then ``CODA_FLASH_BACKWARD``, then "fused" ("split", whose sums come in one order, under
    deterministic algorithms); anything else fails the forward already."""
    monkeypatch.setattr(ft, "BACKWARD", None)
    monkeypatch.delenv("CODA_FLASH_BACKWARD", raising=False)
    assert ft.backward_kind() == "fused"
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert ft.backward_kind() == "split"
        monkeypatch.setenv("CODA_FLASH_BACKWARD", "fused")  # asked for by name: the user's choice
        assert ft.backward_kind() == "fused"
    finally:
        torch.use_deterministic_algorithms(deterministic)
    monkeypatch.setenv("CODA_FLASH_BACKWARD", "split")
    assert ft.backward_kind() == "split"
    q, k, v, nq, nk = _inputs(1, 1, 3, 3, 2, 2, 2)
    params = FlashParams(1.0, 1.0, 2.0, "tanh", "sigmoid")
    monkeypatch.setenv("CODA_FLASH_BACKWARD", "fast")
    with pytest.raises(ValueError, match=r"CODA_FLASH_BACKWARD must be one of \['split', 'fused'\], got 'fast'"):
        ft.forward(q, k, v, nq, nk, None, None, params)
    monkeypatch.setattr(ft, "BACKWARD", "Fused")
    with pytest.raises(ValueError, match="flash_triton.BACKWARD must be one of"):
        ft.backward(q, k, v, nq, nk, None, None, params, torch.zeros(1, 1, 3, 2, dtype=torch.float64))


def test_autotune_setup(monkeypatch):
    """On a GPU the fused kernel is autotuned over CONFIGS["bwd"] with its lanes (TM TN W = the program's threads:
    W groups of warps on their own features) and its atomics' buffers zeroed before each timed run and the kept one
    (nothing runs here: no GPU needed)."""
    monkeypatch.setattr(ft, "_TUNED", {})
    tuned = ft._tuned(ft.triton_jit, "bwd")
    assert tuned.reset_to_zero == ["DQ", "DNQ"] and "SHARED" in tuned.keys
    assert len(tuned.configs) == len(ft.CONFIGS["bwd"])
    for cfg in tuned.configs:
        assert cfg.kwargs["TM"] * cfg.kwargs["TN"] * cfg.kwargs["W"] == 32 * cfg.num_warps
        assert cfg.kwargs["BLOCK_M"] % cfg.kwargs["TM"] == 0 and cfg.kwargs["BLOCK_N"] % cfg.kwargs["TN"] == 0
    for bm, warps in ((12, 8), (64, 3), (64, 1)):
        with pytest.raises(ValueError, match="an even number of warps and blocks .* multiples of its lanes"):
            ft._lanes("bwd", bm, 64, warps)
