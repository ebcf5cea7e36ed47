"""16-bit CoDA (coda_exp/attention/precision.py): every kernel runs float16/bfloat16 inputs (computed in float32,
returned in their dtype), and autocast never hands a 16-bit tensor to a numba kernel. Against float64."""

from __future__ import annotations

import pytest
import torch

from coda_exp.attention import (
    KERNEL_CHOICES,
    CoDACrossAttention,
    CoDAScoring,
    MultiHeadAttention,
    SoftmaxCrossAttention,
    coda_attention,
    coda_matrix,
    l1_distance,
)

TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("kernel", KERNEL_CHOICES)
def test_every_kernel_runs_16_bit_inputs_against_float64(dtype, kernel):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 17, 8, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    key = torch.rand(2, 1, 1, 17, generator=gen) > 0.2
    want = coda_attention(q, k, v, mask=key, causal=True, kernel="torch")
    dout = torch.randn(want.shape, dtype=torch.float64, generator=gen)
    want_grads = torch.autograd.grad(want, (q, k, v), dout)
    low = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    got = coda_attention(*low, mask=key, causal=True, kernel=kernel)
    assert got.dtype == dtype and rel(got, want) < TOL[dtype]
    grads = torch.autograd.grad(got, low, dout.to(dtype))
    # gradients pass through a 16-bit rounding of M's inputs: looser than the values, never NaN
    assert all(g.dtype == dtype and rel(g, w) < 5 * TOL[dtype] for g, w in zip(grads, want_grads))


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("kernel", KERNEL_CHOICES)
def test_l1_distance_runs_16_bit_inputs_on_every_kernel(dtype, kernel):
    """cdist has no bfloat16 kernel and numba takes float32/float64 only: computed in float32, returned in the
    inputs' dtype (it raised '"cdist" not implemented for BFloat16' on every kernel, float16 too)."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 1, 9, 6, dtype=torch.float64, generator=gen, requires_grad=True)  # broadcast over dim 1
    y = torch.randn(2, 3, 7, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    want = (x.unsqueeze(-2) - y.unsqueeze(-3)).abs().sum(-1)
    dout = torch.randn(want.shape, dtype=torch.float64, generator=gen)
    want_grads = torch.autograd.grad(want, (x, y), dout)
    low = [t.detach().to(dtype).requires_grad_() for t in (x, y)]
    got = l1_distance(*low, kernel=kernel)
    assert got.dtype == dtype and got.shape == want.shape and rel(got, want) < TOL[dtype]
    grads = torch.autograd.grad(got, low, dout.to(dtype))
    assert all(g.dtype == dtype and rel(g, w) < 5 * TOL[dtype] for g, w in zip(grads, want_grads))


def test_l1_distance_names_what_it_cannot_take():
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="l1_distance: x and y must share one dtype"):
        l1_distance(x, x.double())
    with pytest.raises(ValueError, match=r"l1_distance: y must be a floating tensor \(\.\.\., L, d\)"):
        l1_distance(x, torch.ones(2, 3, 4, dtype=torch.int64))


def test_coda_matrix_in_bfloat16():
    gen = torch.Generator().manual_seed(1)
    e_a, e_b = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64), torch.randn(2, 6, 4, generator=gen,
                                                                                      dtype=torch.float64)
    want = coda_matrix(e_a, e_b, e_a, e_b, kernel="torch")
    got = coda_matrix(*(t.bfloat16() for t in (e_a, e_b, e_a, e_b)))
    assert got.dtype == torch.bfloat16 and rel(got, want) < TOL[torch.bfloat16]


def test_autocast_keeps_the_cpu_kernels():
    """bf16-mixed: the projections come out in bfloat16 (or float32 beside them); CoDA runs the fused kernel in
    float32 and the backward reaches every parameter."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, CoDAScoring())
    cross = CoDACrossAttention(16, hidden=8, dropout=0.0)
    x, a, b = torch.randn(2, 9, 16), torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mha(x, x, x)
        a2, b2 = cross(a, b)
        (y.float().sum() + a2.float().sum() + b2.float().sum()).backward()
    assert mha.scoring.kernel_used == cross.kernel_used == "fused"
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in [*mha.parameters(), *cross.parameters()])


@pytest.mark.parametrize("kernel", ["auto", "flash", "numba", "torch"])
def test_cross_attention_under_autocast_has_the_softmax_counterparts_dtype(kernel):
    """bf16 autocast: CoDACrossAttention returned float32 (a's dtype) without maps, bfloat16 with them (M b under
    autocast); SoftmaxCrossAttention, which it is a drop-in for, returns bfloat16 either way."""
    torch.manual_seed(0)
    coda = CoDACrossAttention(8, hidden=6, dropout=0.0, kernel=kernel).eval()
    softmax = SoftmaxCrossAttention(8, hidden=6, dropout=0.0).eval()
    a, b = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = softmax(a, b)[0].dtype
        plain, with_maps = coda(a, b), coda(a, b, return_maps=True)
    assert want == torch.bfloat16
    assert [t.dtype for t in (*plain, *with_maps[:2])] == [want] * 4
    for p, m in zip(plain, with_maps[:2]):
        torch.testing.assert_close(p.float(), m.float(), rtol=2e-2, atol=2e-2)
    assert [t.dtype for t in coda(a, b)] == [torch.float32] * 2  # outside autocast: a's dtype
