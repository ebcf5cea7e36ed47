"""``triton_args``: the L1 operands of 16-bit inputs (float16 copies of nq / w, nk / w, w a power of two) and the
Triton kernels that sum their distances in float16 (``triton_math._l1_tile``), under the interpreter against the
float64 reference, at magnitudes that need w < 1 and w > 1, shared and separate N, centred, every PF."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from coda_exp.attention.flash_spec import FlashParams, reference_forward
from coda_exp.attention.kernels import flash_triton as ft
from coda_exp.attention.kernels import triton_args


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("magnitude", [1e-3, 1.0, 1e4])
def test_the_l1_operands_are_exact_float16_copies_scaled_by_a_power_of_two(dtype, magnitude):
    gen = torch.Generator().manual_seed(3)
    nq, nk = ((torch.randn(2, 3, 5, 7, generator=gen) * magnitude).to(dtype) for _ in range(2))
    hq, hk, inv_w = triton_args._l1_args(nq, nk)
    assert hq.dtype == hk.dtype == torch.float16 and inv_w.dtype == torch.float32
    e = torch.log2(inv_w)
    assert e == torch.round(e)  # a power of two: the copies are exact
    top = torch.maximum(hq.abs().max(), hk.abs().max()).float()
    # the largest value brought to (1024, 2048]; float16 inputs by at most 2^15 (1 / w a float16 number)
    assert (1024 < top <= 2048) or (dtype == torch.float16 and e == 15 and top <= 1024)
    for half, x in ((hq, nq), (hk, nk)):
        assert torch.equal(half.double() / inv_w.double(), x.double())
    shared = triton_args._l1_args(nq, nq)
    assert shared[0] is shared[1]  # shared N: one copy


def test_other_dtypes_and_the_switch(monkeypatch):
    x = torch.randn(1, 1, 3, 4)
    assert triton_args._l1_args(x, x)[2] is None and triton_args._l1_args(x.double(), x.double())[0].dtype == \
        torch.float64
    monkeypatch.setattr(triton_args, "HALF_L1", False)  # float32 arithmetic: bfloat16 as it is, float16 as float32
    b = x.bfloat16()
    assert triton_args._l1_args(b, b) == (b, b, None)
    assert [t.dtype for t in triton_args._l1_args(x.half(), x.half())[:2]] == [torch.float32] * 2
    monkeypatch.setattr(triton_args, "HALF_L1", None)
    monkeypatch.setenv(triton_args.HALF_L1_ENV, "yes")
    with pytest.raises(ValueError, match="CODA_FLASH_HALF_L1 must be 1 .* or 0 .*, got 'yes'"):
        triton_args._l1_args(b, b)
    monkeypatch.setenv(triton_args.HALF_L1_ENV, "0")
    assert triton_args._l1_args(b, b)[2] is None


def _close(got: torch.Tensor, want: torch.Tensor, name: str, rel: float = 1e-2) -> None:
    """Within ``rel`` of the tensor's largest value (float16 inputs: the gradients' scale follows the inputs')."""
    scale = want.abs().max().item()
    assert scale > 0, name
    torch.testing.assert_close(got.double(), want, rtol=rel, atol=rel * scale, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("pf,dc,shared,magnitude,center,backward", [
    (2, 4, True, 1.0, False, "fused"), (1, 4, False, 300.0, True, "split"), (2, 8, False, 3.0, True, "fused"),
    (0, 8, False, 3.0, False, "split")])
def test_float16_distances_match_float64(monkeypatch, pf, dc, shared, magnitude, center, backward):
    """Forward and backward of float16 inputs through the half-precision L1 sums, each feature chunk's loop (PF
    0, 1 and the grid of pairs, 2), DC 4 and 8 features summed in float16 at a time: max |x| ~ 3 (w = 2^-10) and
    ~ 1000 (w = 1), centred (the centring pass sums the same scaled distances, and their gradients) and not; the
    fused backward and the split one."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(ft, "INTERPRET_BLOCK", (8, 8, dc, pf))
    monkeypatch.setattr(ft, "BACKWARD", backward)  # the fused kernel, or dkdv + dq
    taken = []
    monkeypatch.setattr(ft, "_l1_args", lambda nq, nk: taken.append(triton_args._l1_args(nq, nk)) or taken[-1])
    b, h, lq, lk, d = 2, 2, 11, 13, 6
    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(b, h, n, d, generator=gen).half() for n in (lq, lk, lk))
    nq, nk = (None, None) if shared else ((torch.randn(b, h, n, d, generator=gen) * magnitude).half()
                                          for n in (lq, lk))
    # beta brings beta D to ~1, where f_N is steepest: a distance's error shows fully in M
    params = FlashParams(alpha=0.5, beta=1.0 / (magnitude * d), gate=2.0, e_fn="tanh", n_fn="sigmoid",
                         shared_n=shared, center_n=center)
    keys = torch.ones(b, lk, dtype=torch.bool)
    keys[0, -3:] = False
    mask = keys[:, None, None, :].expand(b, h, lq, lk)
    leaves = [t.double().requires_grad_() for t in ((q, k, v) if shared else (q, k, v, nq, nk))]
    ref_n = leaves[:2] if shared else leaves[3:]
    want = reference_forward(*leaves[:3], *ref_n, mask, None, params)
    got = ft.forward(q, k, v, nq, nk, mask, None, params)
    assert taken and taken[0][0].dtype == torch.float16  # the half path ran
    _close(got, want, "out")
    dout = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    wants = torch.autograd.grad(want, leaves, dout)
    grads = ft.backward(q, k, v, nq, nk, mask, None, params, dout.half())
    for name, g, w in zip(["q", "k", "v", "nq", "nk"], grads, wants):
        _close(g, w, name)


@pytest.mark.parametrize("scale", [1e-5, 30.0])
def test_the_fused_backwards_float16_sign_sums_match_float64(monkeypatch, scale):
    """The fused backward's sign sums of float16 L1 operands (``triton_bwd._weighted_steps``): G scaled by a power of
    two per tile (upstream gradients of 1e-5, float16 subnormals, and of 30), each thread's sums over 8 keys or
    queries in float16 (32 x 32 blocks, 4 x 4 lanes), and sign(0) = 0 where nq_i = nk_i in every feature (separate
    tensors, equal values: a step of 1/2 there, not 0 or 1), against float64 given the same float16 inputs."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(ft, "INTERPRET_BLOCK", (32, 32, 2, 2))
    monkeypatch.setattr(ft, "BACKWARD", "fused")
    taken = []
    monkeypatch.setattr(ft, "_l1_args", lambda nq, nk: taken.append(triton_args._l1_args(nq, nk)) or taken[-1])
    b, h, n, d = 1, 2, 40, 6
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(b, h, n, d, generator=gen).half() for _ in range(3))
    nq = (torch.randn(b, h, n, d, generator=gen) * 3.0).half()
    nk = nq.clone()  # every pair (i, i) ties in every feature
    params = FlashParams(alpha=0.5, beta=1.0 / (3.0 * d), gate=2.0, e_fn="tanh", n_fn="sigmoid", shared_n=False)
    leaves = [t.double().requires_grad_() for t in (q, k, v, nq, nk)]
    want = reference_forward(*leaves, None, None, params)
    dout = (torch.randn(want.shape, generator=gen, dtype=torch.float64) * scale).half()
    wants = torch.autograd.grad(want, leaves, dout.double())
    grads = ft.backward(q, k, v, nq, nk, None, None, params, dout)
    assert taken and taken[0][0].dtype == torch.float16  # the half path ran
    for name, g, w in zip(["q", "k", "v", "nq", "nk"], grads, wants):
        _close(g, w, name)
