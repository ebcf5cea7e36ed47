"""Fused CoDA composition on CPU: M = f_E(alpha E) * s * f_N(-beta ||n_a_i - n_b_j||_1) (Tay et al. 2019, eqs. 1-5).

``fused_coda_matrix`` computes E_raw = e_a e_b^T with torch.bmm and everything after it in one numba pass per slice (``numba_cpu.gate_forward``): the L1 rows of eq. 2, both activations, the gate scale,
the product and the mask, without the (..., la, lb) temporaries of the plain path. It saves only the two local
derivatives A = dM/dE_raw and B = dM/dD; the backward (``numba_cpu.gate_backward``) forms dE_raw = dM * A and feeds
G = dM * B straight into the L1 gradient, then dE_raw through two bmm. alpha and beta act inside the kernel (no
scaled copies of the inputs).

Covers the uncentred case (``center_e = center_n = False``, any e_fn / n_fn / gate_scale, any bool mask
broadcastable to (..., la, lb), float32/float64 CPU tensors, numba installed) without intermediates for analysis:
it is the kernel ``fused`` of ``dispatch``, which decides when it runs (``auto`` on CPU when it applies; else the
plain PyTorch composition of ``functional``). First-order only.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from coda_exp.attention.kernels import numba_cpu
from coda_exp.attention.kernels.l1 import as_slices, refuse_second_derivative, set_numba_threads, slices
from coda_exp.attention.shapes import broadcast_shapes


def _mask_layout(mask: torch.Tensor | None, batch: tuple, la: int, lb: int):
    """(flat uint8 array, per-slice offsets (S,), (row, col) strides) addressing the mask without broadcasting it.

    Element (s, i, j) of the broadcast mask is ``flat[offsets[s] + i * strides[0] + j * strides[1]]``.
    """
    n_slices = math.prod(batch)
    if mask is None:
        return np.ones(1, dtype=np.uint8), np.zeros(n_slices, dtype=np.int64), np.zeros(2, dtype=np.int64)
    full = batch + (la, lb)
    small = mask.contiguous()
    small = small.reshape((1,) * (len(full) - small.dim()) + tuple(small.shape))
    strides = small.expand(full).stride()  # 0 on broadcast dims
    offsets = torch.zeros(batch, dtype=torch.int64)
    for dim, (size, stride) in enumerate(zip(batch, strides[:-2])):
        if stride:
            shape = [1] * len(batch)
            shape[dim] = size
            offsets = offsets + (torch.arange(size, dtype=torch.int64) * stride).reshape(shape)
    flat = small.reshape(-1).view(torch.uint8).numpy()
    return flat, offsets.reshape(-1).numpy(), np.array(strides[-2:], dtype=np.int64)


# The numba pass as a torch.library custom op with a fake (shape-only) implementation and a registered autograd
# formula: torch.compile traces through it without a graph break (it cannot trace numba).
@torch.library.custom_op("coda_exp::fused_coda", mutates_args=())
def _fused_op(e_a: torch.Tensor, e_b: torch.Tensor, x: torch.Tensor | None, y: torch.Tensor | None,
              mask: torch.Tensor | None, alpha: float, beta: float, gate_scale: float, e_fn: str, n_fn: str,
              need_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(M (..., la, lb), A = dM/dE_raw, B = dM/dD (S, la, lb), empty without ``need_grad``) for e_a (..., la, de),
    e_b (..., lb, de), x = n_a (..., la, dn), y = n_b (..., lb, dn), one batch shape; x = y = None: the N inputs
    are e_a and e_b (shared, eq. 10). The matmul of eq. 1 runs as bmm on a transposed view of e_b (torch 2.13's
    CPU bmm takes it as it is: ~15 % faster than copying e_b^T into a row-major operand first, which was faster
    once), the rest in ``numba_cpu.gate_forward``."""
    ea, eb = slices(e_a), slices(e_b)  # (S, la, de), (S, lb, de)
    xs, ys = _n_slices(ea, eb, x, y)  # (S, la, dn), (S, lb, dn)
    energy = torch.bmm(ea, eb.transpose(1, 2))  # (S, la, lb) = E_raw, eq. 1 without alpha
    es = energy.numpy()
    n_slices, la, lb = es.shape
    dtype = es.dtype
    m = np.empty_like(es)
    a = np.empty_like(es) if need_grad else np.empty((n_slices, 0, 0), dtype=dtype)
    b = np.empty_like(a)
    if m.size:
        flat, offsets, strides = _mask_layout(mask, tuple(e_a.shape[:-2]), la, lb)
        coefs = np.array([alpha, beta, gate_scale, 0.0], dtype=dtype)
        codes = np.array([numba_cpu.FUNCTION_CODES[e_fn], numba_cpu.FUNCTION_CODES[n_fn]], dtype=np.int64)
        consts, ints = numba_cpu.exp_constants(dtype)
        set_numba_threads()
        numba_cpu.gate_forward(es, xs, ys, flat, offsets, strides, coefs, codes, consts, ints, need_grad, m, a, b)
    return torch.from_numpy(m).reshape(e_a.shape[:-1] + (lb,)), torch.from_numpy(a), torch.from_numpy(b)


@_fused_op.register_fake
def _(e_a, e_b, x, y, mask, alpha, beta, gate_scale, e_fn, n_fn, need_grad):
    slices, la, lb = math.prod(e_a.shape[:-2]), e_a.shape[-2], e_b.shape[-2]
    local = (slices, la, lb) if need_grad else (slices, 0, 0)
    return e_a.new_empty(e_a.shape[:-1] + (lb,)), e_a.new_empty(local), e_a.new_empty(local)


@_fused_op.register_vmap
def _(info, in_dims, e_a, e_b, x, y, mask, alpha, beta, gate_scale, e_fn, n_fn, need_grad):
    """torch.vmap: the op on the physical tensors, the vmapped dim first as one more batch dim (the op takes any),
    and ``need_grad`` decided on them: a BatchedTensor says requires_grad=False (A and B were then left empty, and
    a backward of vmap's result failed)."""
    size = info.batch_size
    ndim = e_a.dim() - (in_dims[0] is not None)  # e_a's logical dims: the batch dims + (la, de)

    def front(t, dim):
        return t.unsqueeze(0).expand(size, *t.shape) if dim is None else t.movedim(dim, 0)

    tensors = [None if t is None else front(t, dim) for t, dim in zip((e_a, e_b, x, y), in_dims)]
    if mask is not None and in_dims[4] is not None:  # (size, 1 ..., mask's logical dims): aligned with e_a's
        mask = mask.movedim(in_dims[4], 0)
        mask = mask.reshape(size, *[1] * (ndim - mask.dim() + 1), *mask.shape[1:])
    need_grad = need_grad or (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors))
    m, a, b = _fused_op(*tensors, mask, alpha, beta, gate_scale, e_fn, n_fn, need_grad)
    local = (size, a.shape[0] // size, *a.shape[1:])  # (size x slices, la, lb) -> (size, slices, la, lb)
    return (m, a.reshape(local), b.reshape(local)), (0, 0, 0)


@torch.library.custom_op("coda_exp::fused_coda_backward", mutates_args=())
def _fused_backward_op(grad: torch.Tensor, e_a: torch.Tensor, e_b: torch.Tensor, x: torch.Tensor | None,
                       y: torch.Tensor | None, a: torch.Tensor,
                       b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dL/de_a, dL/de_b, dL/dx, dL/dy) of ``_fused_op`` for dL/dM ``grad``: ``numba_cpu.gate_backward`` forms
    dE_raw = dM * A and feeds G = dM * B straight into the L1 gradient, then dE_raw through two bmm. Shared
    (x = y = None): the bmm add into the L1 gradients (baddbmm, no separate sum) and dL/dx, dL/dy are empty."""
    ea, eb = slices(e_a), slices(e_b)
    xs, ys = _n_slices(ea, eb, x, y)
    an, bn = a.numpy(), b.numpy()
    gs = grad.reshape(an.shape).to(a.dtype).contiguous().numpy()
    de = np.empty_like(an)
    dx, dy = np.zeros_like(xs), np.zeros_like(ys)
    if de.size:
        set_numba_threads()
        numba_cpu.gate_backward(gs, an, bn, xs, ys, de, dx, dy)
    d_energy = torch.from_numpy(de)  # (S, la, lb) = dL/dE_raw
    dx_t, dy_t = torch.from_numpy(dx), torch.from_numpy(dy)
    if x is None:  # dL/de_a = dE_raw e_b + the L1 gradient, in one baddbmm each
        d_ea = dx_t.baddbmm_(d_energy, eb).reshape(e_a.shape)
        d_eb = dy_t.baddbmm_(d_energy.transpose(1, 2), ea).reshape(e_b.shape)
        return d_ea, d_eb, e_a.new_empty(0), e_b.new_empty(0)
    d_ea = torch.bmm(d_energy, eb).reshape(e_a.shape)
    d_eb = torch.bmm(d_energy.transpose(1, 2), ea).reshape(e_b.shape)
    return d_ea, d_eb, dx_t.reshape(x.shape), dy_t.reshape(y.shape)


@_fused_backward_op.register_fake
def _(grad, e_a, e_b, x, y, a, b):
    if x is None:
        return e_a.new_empty(e_a.shape), e_b.new_empty(e_b.shape), e_a.new_empty(0), e_b.new_empty(0)
    return e_a.new_empty(e_a.shape), e_b.new_empty(e_b.shape), x.new_empty(x.shape), y.new_empty(y.shape)


def _setup_context(ctx, inputs, output):
    e_a, e_b, x, y = inputs[:4]
    _, a, b = output
    ctx.save_for_backward(e_a, e_b, x, y, a, b)
    # A and B never receive a gradient: without this autograd would fill two (S, la, lb) tensors of zeros for
    # them on every backward (~8 ms of a 80 ms step at B 32, H 8, L 128)
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_m, grad_a, grad_b):
    if grad_m is None:  # M unused (set_materialize_grads(False) leaves undefined gradients as None)
        return (None,) * 11
    e_a, e_b, x, y, a, b = ctx.saved_tensors
    d_ea, d_eb, dx, dy = _fused_backward_op(grad_m.contiguous(), e_a, e_b, x, y, a, b)
    if x is None:  # shared: the L1 gradients are already in d_ea, d_eb
        dx = dy = None
    return d_ea, d_eb, dx, dy, None, None, None, None, None, None, None


_fused_op.register_autograd(_backward, setup_context=_setup_context)
refuse_second_derivative(_fused_backward_op, "fused")


def _n_slices(ea: torch.Tensor, eb: torch.Tensor, x: torch.Tensor | None, y: torch.Tensor | None):
    """The N inputs as numpy slices: x and y, or (shared, x = y = None) the E slices ``ea``, ``eb`` themselves."""
    return (ea.numpy(), eb.numpy()) if x is None else (as_slices(x), as_slices(y))


def fused_coda_matrix(e_a: torch.Tensor, e_b: torch.Tensor, n_a: torch.Tensor, n_b: torch.Tensor, *,
                      alpha: float, beta: float, e_fn: str, n_fn: str, gate_scale: float,
                      mask: torch.Tensor | None) -> torch.Tensor:
    """Uncentred M = f_E(alpha e_a e_b^T) * gate_scale * f_N(-beta ||n_a_i - n_b_j||_1) (eqs. 1-3, 5), (..., la, lb).

    Invalid pairs (mask False) are exactly 0. Same values and gradients as the plain composition of
    ``functional`` (options validated by ``CoDAOptions``); ``dispatch`` calls it only where the kernel applies.
    """
    for name, (u, v) in {"e": (e_a, e_b), "n": (n_a, n_b)}.items():
        if u.shape[-1] != v.shape[-1]:
            raise ValueError(f"feature sizes differ: {name}_a has d={u.shape[-1]}, {name}_b has d={v.shape[-1]}")
    la, lb = e_a.shape[-2], e_b.shape[-2]
    if (n_a.shape[-2], n_b.shape[-2]) != (la, lb):
        raise ValueError(f"lengths differ: e_a/e_b have {(la, lb)}, n_a/n_b have {(n_a.shape[-2], n_b.shape[-2])}")
    shapes = [t.shape[:-2] for t in (e_a, e_b, n_a, n_b)] + ([mask.shape[:-2]] if mask is not None else [])
    batch = tuple(broadcast_shapes(*shapes))
    shared = n_a is e_a and n_b is e_b  # eq. 10: one input per side, its two gradients summed inside the op
    tensors = [t.expand(batch + t.shape[-2:]) for t in ((e_a, e_b) if shared else (e_a, e_b, n_a, n_b))]
    need_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if shared:
        tensors += [None, None]
    return _fused_op(*tensors, mask, float(alpha), float(beta), float(gate_scale), e_fn, n_fn, need_grad)[0]
