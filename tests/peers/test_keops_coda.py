"""coda_exp.peers.keops_coda (the KeOps peer of Flash-CoDA): equal to the materialising reference in float64, values
and KeOps-autograd gradients, with masks, causal, shared and unshared N; what it cannot express is refused before
anything compiles; a missing pykeops names the ``[keops]`` extra.

The comparisons skip without pykeops (CI installs ``[dev]``, which leaves ``[keops]`` out). Each KeOps formula (one
per dtype, feature sizes, variant, and gradient) compiles ~8 s of g++ once, then comes from the cache: here a cache
folder per xdist worker (KeOps rewrites its cache index at exit, so two processes must not share one), so a cold
run costs ~35 s (the default tests' 4 formulas) and a warm one a second or two. Compared in float64: in float32,
sign(nq - nk) of near-ties flips between implementations and the L1 gradients legitimately differ (~1e-2).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from coda_exp import extras
from coda_exp.attention import coda_attention
from coda_exp.attention.dispatch import ENV_VAR
from coda_exp.peers.keops_coda import KeOpsUnsupported, keops_coda_attention

if "KEOPS_CACHE_FOLDER" not in os.environ and "keopscore" not in sys.modules:
    os.environ["KEOPS_CACHE_FOLDER"] = str(Path.home() / ".cache" / "keops-coda-exp-tests"
                                           / os.environ.get("PYTEST_XDIST_WORKER", "main"))


@pytest.fixture
def keops():
    pytest.importorskip("pykeops")


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def _inputs(seed, b=2, h=3, lq=9, lk=12, de=8, dv=5, dn=None, head_shared_k=False):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=gen).requires_grad_()

    q, v = rnd(b, h, lq, de), rnd(b, h, lk, dv)
    k = rnd(b, 1 if head_shared_k else h, lk, de)
    nq, nk = (rnd(b, h, lq, dn), rnd(b, h, lk, dn)) if dn else (None, None)
    key = torch.rand(b, 1, 1, lk, generator=gen) > 0.3
    query = torch.rand(b, 1, lq, 1, generator=gen) > 0.2
    return q, k, v, nq, nk, key, query


def _compare(q, k, v, nq, nk, **kwargs):
    got = keops_coda_attention(q, k, v, n_q=nq, n_k=nk, **kwargs)
    want = coda_attention(q, k, v, n_q=nq, n_k=nk, kernel="torch", **kwargs)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    leaves = [t for t in (q, k, v, nq, nk) if t is not None]
    dout = torch.randn(want.shape, dtype=want.dtype, generator=torch.Generator().manual_seed(5))
    for name, g, w in zip(["q", "k", "v", "n_q", "n_k"], torch.autograd.grad(got, leaves, dout),
                          torch.autograd.grad(want, leaves, dout)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=lambda m, name=name: f"d{name}: {m}")


def test_shared_n_with_key_padding_query_mask_and_causal(keops):
    """The bench's case (eq. 10: N on q and k), every mask KeOps takes, Lq != Lk (causal offset Lk - Lq), a key
    tensor broadcast over heads; gate 2 (the default), temperatures off 1."""
    q, k, v, _, _, key, query = _inputs(0, head_shared_k=True)
    _compare(q, k, v, None, None, mask=key, query_mask=query, causal=True, alpha=0.7, beta=0.4)


@pytest.mark.slow
def test_unshared_n_with_a_row_mask_query_scale_and_gate_one(keops):
    q, k, v, nq, nk, _, query = _inputs(1, dn=4)
    _compare(q, k, v, nq, nk, mask=query, query_scale=True, scale=False, gate_scale=1.0, beta=2.0)


@pytest.mark.slow
def test_float32_values_against_float64(keops):
    """float32 against the float64 reference on the same (rounded) inputs: values to float32 precision."""
    q, k, v, _, _, key, _ = _inputs(2)
    want = coda_attention(q, k, v, mask=key, kernel="torch")
    got = keops_coda_attention(*(t.detach().float() for t in (q, k, v)), mask=key)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


def test_empty_slices_are_zero_without_compiling():
    q, k, v, *_ = _inputs(3, lk=0)
    out = keops_coda_attention(q, k, v)
    assert out.shape == (2, 3, 9, 5) and not out.any()


@pytest.mark.parametrize("kwargs, match", [
    ({"mask": torch.ones(2, 1, 9, 12, dtype=torch.bool)}, "not a dense pair mask"),
    ({"center_e": True}, "does not centre"),
    ({"n_fn": "arctan"}, "f_E = tanh and f_N = sigmoid only"),
    ({"e_fn": "sigmoid"}, "f_E = tanh and f_N = sigmoid only"),
    ({"dropout_p": 0.1}, "no dropout"),
])
def test_what_keops_cannot_express_is_refused_before_compiling(kwargs, match):
    q, k, v, *_ = _inputs(4)
    with pytest.raises(KeOpsUnsupported, match=match):
        keops_coda_attention(q, k, v, **kwargs)


def test_bfloat16_is_refused():
    q, k, v, *_ = _inputs(4)
    with pytest.raises(KeOpsUnsupported, match="no bfloat16"):
        keops_coda_attention(*(t.detach().bfloat16() for t in (q, k, v)))


def test_a_missing_pykeops_names_the_extra(monkeypatch):
    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda module: module != "pykeops" and real(module))
    q, k, v, *_ = _inputs(4)
    with pytest.raises(extras.MissingExtraError, match=r"needs pykeops.*pip install 'coda-exp\[keops\]'"):
        keops_coda_attention(q, k, v)
