"""Fused CoDA kernel (eqs. 1-5 in one numba pass) against the explicit reference and the plain PyTorch path."""

from __future__ import annotations

import itertools

import pytest
import torch

from coda_exp.attention import CoDAScoring, coda_matrix
from coda_exp.attention.dispatch import ENV_VAR, describe, select_kernel
from tests.attention.reference import REF_FN, make_inputs, reference

FN_PAIRS = list(itertools.product(["tanh", "sigmoid"], ["sigmoid", "tanh", "arctan", "algebraic"]))


def _masks(batch: int, heads: int, la: int, lb: int) -> dict[str, torch.Tensor | None]:
    """Mask layouts the fused kernel addresses without broadcasting: none, pair, key padding, causal, both."""
    gen = torch.Generator().manual_seed(4)
    keys = torch.ones(batch, lb, dtype=torch.bool)
    keys[0, lb - 2:] = False
    causal = torch.ones(la, lb, dtype=torch.bool).tril(diagonal=lb - la)
    return {
        "none": None,
        "pair": torch.rand(batch, 1, la, lb, generator=gen) > 0.3,
        "keys": keys[:, None, None, :],
        "causal": causal[None, None],
        "keys+causal": keys[:, None, None, :] & causal,
        "per-head": torch.rand(batch, heads, la, lb, generator=gen) > 0.5,
        "empty-row": torch.zeros(1, 1, la, lb, dtype=torch.bool).index_fill_(2, torch.tensor([0, 2]), True),
    }


@pytest.mark.parametrize("mask_name", list(_masks(2, 3, 6, 9)))
@pytest.mark.parametrize("e_fn,n_fn", FN_PAIRS)
@pytest.mark.parametrize("gate_scale", [1.0, 2.0])
def test_fused_matches_reference_float64(e_fn, n_fn, gate_scale, mask_name):
    tensors, _ = make_inputs(FN_PAIRS.index((e_fn, n_fn)), batch=(2, 3), la=6, lb=9, de=5, dn=7, requires_grad=True)
    mask = _masks(2, 3, 6, 9)[mask_name]
    opts = {"alpha": 0.7, "beta": 0.4, "e_fn": e_fn, "n_fn": n_fn, "center_e": False, "center_n": False,
            "gate_scale": gate_scale}
    assert select_kernel("auto", describe(*tensors, mask=mask)).name == "fused"
    got = coda_matrix(*tensors, mask=mask, kernel="fused", scale=False, **opts)
    want = reference(*tensors, mask=mask, **opts)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    if mask is not None:
        invalid = ~mask.expand(got.shape)
        assert torch.equal(got[invalid], torch.zeros(int(invalid.sum()), dtype=got.dtype))
    grad = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    for g, w in zip(torch.autograd.grad(got, tensors, grad), torch.autograd.grad(want, tensors, grad)):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("e_fn,n_fn", FN_PAIRS[::3] + [FN_PAIRS[-1]])
def test_fused_gradcheck(e_fn, n_fn):
    tensors, mask = make_inputs(7, batch=(2,), la=5, lb=4, de=2, dn=3, requires_grad=True)
    opts = {"e_fn": e_fn, "n_fn": n_fn, "alpha": 0.8, "beta": 0.6, "mask": mask, "kernel": "fused"}
    assert torch.autograd.gradcheck(lambda *t: coda_matrix(*t, **opts), tensors)


@pytest.mark.parametrize("e_fn,n_fn", FN_PAIRS)
def test_fused_equals_plain_path(e_fn, n_fn):
    """kernel fused vs numba: the plain PyTorch composition on the same numba L1 distances."""
    tensors, mask = make_inputs(3, batch=(3, 2), la=9, lb=13, de=8, dn=6, requires_grad=True)
    opts = {"alpha": 0.5, "beta": 0.3, "e_fn": e_fn, "n_fn": n_fn, "mask": mask}
    got, want = coda_matrix(*tensors, kernel="fused", **opts), coda_matrix(*tensors, kernel="numba", **opts)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    grad = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for g, w in zip(torch.autograd.grad(got, tensors, grad), torch.autograd.grad(want, tensors, grad)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mask_name", ["none", "keys+causal"])
def test_fused_shared_inputs_sum_both_gradients(mask_name):
    """n_a is e_a and n_b is e_b (eq. 10): the op takes each side once and adds the L1 gradient into the bmm's
    (baddbmm); the same values and gradients as two distinct copies of the inputs."""
    gen = torch.Generator().manual_seed(8)
    x, y = (torch.randn(2, 3, n, 6, dtype=torch.float64, generator=gen) for n in (6, 9))
    mask = _masks(2, 3, 6, 9)[mask_name]
    opts = {"alpha": 0.7, "beta": 0.4, "mask": mask, "kernel": "fused", "scale": False}
    xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
    got = coda_matrix(xs, ys, xs, ys, **opts)
    pair = [t.clone().requires_grad_() for t in (x, y, x, y)]
    want = coda_matrix(*pair, **opts)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    grad = torch.randn(want.shape, dtype=torch.float64, generator=gen)
    dx, dy = torch.autograd.grad(got, (xs, ys), grad)
    d_ea, d_eb, d_na, d_nb = torch.autograd.grad(want, pair, grad)
    torch.testing.assert_close(dx, d_ea + d_na, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dy, d_eb + d_nb, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("e_fn,n_fn", [("tanh", "sigmoid"), ("sigmoid", "tanh"), ("tanh", "algebraic")])
def test_fused_float32_matches_float64_reference(e_fn, n_fn):
    gen = torch.Generator().manual_seed(5)
    q, k = torch.randn(4, 3, 37, 16, generator=gen), torch.randn(4, 3, 29, 16, generator=gen)
    mask = torch.rand(4, 1, 1, 29, generator=gen) > 0.2
    opts = {"alpha": 0.25, "beta": 0.25, "e_fn": e_fn, "n_fn": n_fn, "mask": mask}
    qr, kr = q.requires_grad_(), k.requires_grad_()
    got = coda_matrix(qr, kr, qr, kr, kernel="fused", scale=False, **opts)
    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    gate = 2.0 if n_fn == "sigmoid" else 1.0  # gate_scale=None: eq. 5 for sigmoid only
    want = reference(q64, k64, q64, k64, 0.25, 0.25, e_fn, n_fn, False, False, gate, mask)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    grad = torch.randn(want.shape, generator=gen)
    got_g = torch.autograd.grad(got, (qr, kr), grad)
    want_g = torch.autograd.grad(want, (q64, k64), grad.double())
    for g, w in zip(got_g, want_g):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)


def test_extreme_values_saturate_without_nan():
    """exp is clamped, never inf: tanh(+-big) = +-1, a far pair's gate underflows to ~0 (de-attention)."""
    e = torch.tensor([[[30.0, -30.0], [1e4, -1e4]]], dtype=torch.float64)
    n_a = torch.zeros(1, 2, 3, dtype=torch.float64)
    n_b = torch.tensor([[[0.0, 0.0, 0.0], [100.0, 100.0, 100.0]]], dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        m = coda_matrix(e.to(dtype), torch.eye(2, dtype=dtype)[None], n_a.to(dtype), n_b.to(dtype),
                        kernel="fused", scale=False)
        assert torch.isfinite(m).all()
        torch.testing.assert_close(m[0, :, 0], torch.tensor([1.0, 1.0], dtype=dtype))  # tanh(30), gate 1
        assert m[0, :, 1].abs().max() < (1e-30 if dtype == torch.float64 else 1e-37)


def test_broadcast_batch_dims_and_no_grad_path():
    gen = torch.Generator().manual_seed(6)
    e_a = torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    e_b = torch.randn(3, 6, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    n_a = torch.randn(1, 3, 5, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    n_b = torch.randn(2, 1, 6, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    got = coda_matrix(e_a, e_b, n_a, n_b, kernel="fused")
    want = coda_matrix(e_a, e_b, n_a, n_b, kernel="torch")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    for g, w in zip(torch.autograd.grad(got.sum(), (e_a, e_b, n_a, n_b)),
                    torch.autograd.grad(want.sum(), (e_a, e_b, n_a, n_b))):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        assert torch.equal(coda_matrix(e_a, e_b, n_a, n_b, kernel="fused"), got.detach())


def test_deterministic_and_first_order_only():
    gen = torch.Generator().manual_seed(8)
    q, k = (torch.randn(2, 4, 23, 8, generator=gen, requires_grad=True) for _ in range(2))
    runs = []
    for _ in range(2):
        m = coda_matrix(q, k, q, k, kernel="fused")
        runs.append((m, *torch.autograd.grad(m.square().sum(), (q, k))))
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    (gq,) = torch.autograd.grad(coda_matrix(q, k, q, k, kernel="fused").sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError):
        gq.sum().backward()


def test_empty_sizes():
    for la, lb, d in [(0, 4, 3), (3, 0, 3), (3, 4, 0)]:
        x = torch.randn(2, la, d, dtype=torch.float64, requires_grad=True)
        y = torch.randn(2, lb, d, dtype=torch.float64, requires_grad=True)
        m = coda_matrix(x, y, x, y, kernel="fused")
        assert m.shape == (2, la, lb)
        torch.testing.assert_close(m, coda_matrix(x, y, x, y, kernel="torch"))
        m.sum().backward()


@pytest.mark.parametrize("causal", [False, True])
def test_coda_scoring_fused_matches_plain(causal, monkeypatch):
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 11, 8, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    mask = torch.ones(11, 11, dtype=torch.bool).tril()[None, None] if causal else None
    outs = []
    for flag in ("fused", "numba"):
        monkeypatch.setenv(ENV_VAR, flag)
        scoring = CoDAScoring()
        out, _ = scoring(q, k, v, mask=mask)
        assert scoring.kernel_used == flag
        outs.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v))))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13)


def test_reference_functions_cover_the_kernel_codes():
    from coda_exp.attention.kernels.numba_cpu import FUNCTION_CODES
    assert set(FUNCTION_CODES) == set(REF_FN)
