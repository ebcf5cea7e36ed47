"""Pairwise L1 distance without a (..., la, lb, d) temporary: the N affinity of CoDA (Tay et al. 2019, eq. 2).

``l1_distance(x, y)[..., i, j] = sum_k |x[..., i, k] - y[..., j, k]|``.

Three implementations, each the L1 of one kernel of ``dispatch`` (which picks among them: ``select_kernel``, the
``CODA_KERNEL`` environment variable; the public entry point is ``dispatch.l1_distance``):

* ``cdist_l1`` (kernel ``torch``): ``torch.cdist(x, y, p=1)`` and its gradient. Reference; works on every
  device/dtype; ``_cdist_backward`` has no derivative, so under ``create_graph`` the gradient is ``chunked``'s
  (twice differentiable) instead. Slow on CPU (its backward dominates
  CoDA's cost), and its CUDA backward allocates a (..., lb, la, d) buffer (4.3 GB at B*H=256, L=256, d=64 in
  float32).
* ``chunked_l1`` (kernel ``chunked``): plain PyTorch on any device and dtype, a ``torch.autograd.Function`` whose
  forward is ``torch.cdist`` (its p=1 forward reduces over d per pair on CPU and CUDA, no (la, lb, d) buffer) and
  whose backward forms dX_ik = sum_j G_ij sign(x_ik - y_jk), dY_jk = -sum_i G_ij sign(x_ik - y_jk) in blocks of
  (..., rows, lb, features): one temporary at a time, at most ``chunk_bytes`` (default ``CHUNK_BYTES``, 256 MiB)
  unless a single (..., 1, lb, 1) block is larger. Twice differentiable: under ``create_graph`` the blocks are
  formed out of place (dX, dY are linear in G, piecewise constant in x, y).
* ``numba_l1`` (kernel ``numba``): a ``torch.autograd.Function`` over the parallel numba kernels of ``numba_cpu``
  (float32/float64 CPU tensors only), ``prange`` over the batch x heads slices. Forward: y transposed once per
  slice to (d, lb), four rows of x per block, innermost loop over contiguous j. Backward: dX_ik = sum_j G_ij
  sign(x_ik - y_jk) and dY_jk = -sum_i G_ij sign(x_ik - y_jk) in one pass per slice, four rows at a time,
  innermost loop over contiguous j (dX a vector reduction, dY kept transposed and shared by the block), only the
  span of j where G != 0 (masked / causal pairs skipped). Extra memory: O(lb * d) per thread. sign(0) = 0, as in
  torch.cdist's gradient. First-order only (a double backward raises, naming kernel ``chunked``).

Kernels are compiled on first use per dtype (a few seconds) and cached on disk (``cache=True``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from coda_exp.attention.kernels import numba_cpu
from coda_exp.attention.shapes import broadcast_shapes

HAVE_NUMBA = numba_cpu.HAVE_NUMBA
if HAVE_NUMBA:
    import numba

NUMBA_DTYPES = (torch.float32, torch.float64)
CHUNK_BYTES = 256 * 2**20  # default bound of the chunked backward's one (..., rows, lb, features) temporary


def set_numba_threads() -> None:
    """Use as many numba threads as torch does (never more than numba was started with)."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))


def slices(t: torch.Tensor) -> torch.Tensor:
    """(..., l, d) tensor -> contiguous, detached (S, l, d) tensor (a view when possible)."""
    return t.detach().reshape(math.prod(t.shape[:-2]), t.shape[-2], t.shape[-1]).contiguous()


def as_slices(t: torch.Tensor) -> np.ndarray:
    """(..., l, d) tensor -> C-contiguous (S, l, d) numpy view/copy (``slices`` as numpy)."""
    return slices(t).numpy()


def second_derivative_error(kernel: str) -> RuntimeError:
    """The one error of a kernel without a second derivative (its backward is numba or Triton code)."""
    return RuntimeError(f"CoDA kernel {kernel!r} has no second derivative (a backward through its backward: "
                        "create_graph=True, torch.func.hessian, a gradient penalty): use kernel=chunked")


def refuse_second_derivative(backward_op, kernel: str) -> None:
    """Give the backward custom op of ``kernel`` an autograd formula that raises ``second_derivative_error``: a
    double backward then names the kernel and the one to use, not PyTorch's 'no autograd formula was registered'."""
    def backward(ctx, *grads):
        raise second_derivative_error(kernel)

    backward_op.register_autograd(backward, setup_context=lambda ctx, inputs, output: None)


# The numba kernels as torch.library custom ops (fake implementations, a registered autograd formula), so that
# torch.compile traces a model through them without a graph break; x, y already expanded to one batch shape.
@torch.library.custom_op("coda_exp::l1_numba", mutates_args=())
def _l1_numba(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    xs, ys = as_slices(x), as_slices(y)  # (S, la, d), (S, lb, d)
    out = np.empty((xs.shape[0], xs.shape[1], ys.shape[1]), dtype=xs.dtype)  # (S, la, lb)
    if out.size:
        set_numba_threads()
        numba_cpu.l1_forward(xs, ys, out)
    return torch.from_numpy(out).reshape(x.shape[:-1] + (y.shape[-2],))


@_l1_numba.register_fake
def _(x, y):
    return x.new_empty(x.shape[:-1] + (y.shape[-2],))


@torch.library.custom_op("coda_exp::l1_numba_backward", mutates_args=())
def _l1_numba_backward(grad: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = as_slices(x), as_slices(y)
    gs = grad.reshape(xs.shape[0], xs.shape[1], ys.shape[1]).to(x.dtype).contiguous().numpy()  # (S, la, lb)
    dx = np.zeros_like(xs)
    dy = np.zeros_like(ys)
    if xs.size and ys.size:
        set_numba_threads()
        numba_cpu.l1_backward(xs, ys, gs, dx, dy)
    return torch.from_numpy(dx).reshape(x.shape), torch.from_numpy(dy).reshape(y.shape)


@_l1_numba_backward.register_fake
def _(grad, x, y):
    return x.new_empty(x.shape), y.new_empty(y.shape)


def _l1_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _l1_backward(ctx, grad):
    return _l1_numba_backward(grad, *ctx.saved_tensors)


_l1_numba.register_autograd(_l1_backward, setup_context=_l1_setup_context)
refuse_second_derivative(_l1_numba_backward, "numba")


def chunk_plan(n_slices: int, la: int, lb: int, d: int, itemsize: int, chunk_bytes: int) -> tuple[int, int]:
    """(rows, features) per block of the chunked backward, so that its (S, rows, lb, features) temporary fits
    ``chunk_bytes``: all la rows and as many features as fit, else one feature and as many rows as fit (at least
    one row and one feature, whatever the budget)."""
    units = max(1, chunk_bytes // max(1, n_slices * lb * itemsize))  # (row, feature) units of one block
    if units >= la * d:
        return max(la, 1), max(d, 1)
    if units >= la:
        return la, units // la
    return units, 1


class _L1DistanceChunked(torch.autograd.Function):
    """cdist forward, memory-bounded plain-PyTorch backward; x, y already expanded to the same batch shape.
    Written for torch.func (``setup_context``, ``generate_vmap_rule``): it runs under ``vmap``, e.g. several seeds
    of one model trained in one process (``scripts/bench_fast_path.py``'s ``vmap`` lever)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, y: torch.Tensor, chunk_bytes: int) -> torch.Tensor:
        return torch.cdist(x, y, p=1)  # (..., la, lb)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, y, chunk_bytes = inputs
        ctx.save_for_backward(x, y)
        ctx.save_for_forward(x, y)
        ctx.chunk_bytes = chunk_bytes

    @staticmethod
    def jvp(ctx, x_t, y_t, _):
        return l1_tangent(*ctx.saved_tensors, x_t, y_t, ctx.chunk_bytes)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, y = ctx.saved_tensors  # (..., la, d), (..., lb, d)
        return (*l1_grad_blocks(x, y, grad, ctx.chunk_bytes), None)


def l1_grad_blocks(x: torch.Tensor, y: torch.Tensor, grad: torch.Tensor,
                   chunk_bytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(dX, dY) of the L1 distance for upstream ``grad`` (..., la, lb), in (..., rows, lb, features) blocks of at
    most ``chunk_bytes``: dX_ik = sum_j G_ij sign(x_ik - y_jk), dY_jk = -sum_i G_ij sign(x_ik - y_jk), sign(0) = 0.
    Under create_graph (a double backward, torch.func.grad, jacrev) the blocks are formed and joined out of place, so
    autograd differentiates dX, dY in G, the one input they are not piecewise constant in (sign' = 0 a.e.), and a
    batched G (jacrev's vmap over the backward) never meets an unbatched buffer; the first derivative alone writes
    its blocks in place."""
    graph = torch.is_grad_enabled()
    la, lb, d = x.shape[-2], y.shape[-2], x.shape[-1]
    grad = grad.to(x.dtype)  # (..., la, lb)
    if x.numel() == 0 or y.numel() == 0:
        return x.new_zeros(x.shape), y.new_zeros(y.shape)
    rows, width = chunk_plan(math.prod(x.shape[:-2]), la, lb, d, x.element_size(), chunk_bytes)
    if graph:
        dx_rows, dy_cols = [], [None] * len(range(0, d, width))
        for r0 in range(0, la, rows):
            g = grad[..., r0:r0 + rows, :].unsqueeze(-1)  # (..., r, lb, 1)
            pieces = []
            for c, c0 in enumerate(range(0, d, width)):
                diff = x[..., r0:r0 + rows, c0:c0 + width].unsqueeze(-2) - y[..., c0:c0 + width].unsqueeze(-3)
                t = diff.sign() * g  # (..., r, lb, w), sign(0) = 0
                pieces.append(t.sum(-2))
                dy_cols[c] = -t.sum(-3) if dy_cols[c] is None else dy_cols[c] - t.sum(-3)
            dx_rows.append(torch.cat(pieces, -1))
        return torch.cat(dx_rows, -2), torch.cat(dy_cols, -1)
    dx = x.new_zeros(x.shape)  # dense even though x is an expanded view (and batched under vmap)
    dy = y.new_zeros(y.shape)
    for r0 in range(0, la, rows):
        g = grad[..., r0:r0 + rows, :].unsqueeze(-1)  # (..., r, lb, 1)
        for c0 in range(0, d, width):
            xc = x[..., r0:r0 + rows, c0:c0 + width]  # (..., r, w)
            yc = y[..., c0:c0 + width]  # (..., lb, w)
            t = (xc.unsqueeze(-2) - yc.unsqueeze(-3)).sign_().mul_(g)  # (..., r, lb, w), sign(0) = 0
            dx[..., r0:r0 + rows, c0:c0 + width] = t.sum(-2)
            dy[..., c0:c0 + width] -= t.sum(-3)
            del t
    return dx, dy


def l1_tangent(x: torch.Tensor, y: torch.Tensor, x_t: torch.Tensor | None, y_t: torch.Tensor | None,
               chunk_bytes: int) -> torch.Tensor:
    """Forward-mode derivative of the L1 distance (torch.func.jvp, jacfwd, hessian): sum_k sign(x_ik - y_jk)
    (x_t_ik - y_t_jk) for tangents x_t, y_t (None: 0), in the backward's (..., rows, lb, features) blocks."""
    la, lb, d = x.shape[-2], y.shape[-2], x.shape[-1]
    x_t = torch.zeros_like(x) if x_t is None else x_t
    y_t = torch.zeros_like(y) if y_t is None else y_t
    if x.numel() == 0 or y.numel() == 0:
        return (x_t[..., :, None, :1] - y_t[..., None, :, :1]).sum(-1) * 0  # (..., la, lb), batched as they are
    rows, width = chunk_plan(math.prod(x.shape[:-2]), la, lb, d, x.element_size(), chunk_bytes)
    out = []
    for r0 in range(0, la, rows):
        acc = 0
        for c0 in range(0, d, width):
            sign = (x[..., r0:r0 + rows, None, c0:c0 + width] - y[..., None, :, c0:c0 + width]).sign()
            acc = acc + (sign * (x_t[..., r0:r0 + rows, None, c0:c0 + width] - y_t[..., None, :, c0:c0 + width])).sum(-1)
        out.append(acc)
    return torch.cat(out, -2)


def _expanded(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y expanded to one batch shape (autograd sums the gradient back over broadcast dims)."""
    batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
    return x.expand(batch + x.shape[-2:]), y.expand(batch + y.shape[-2:])


class _L1DistanceCdist(torch.autograd.Function):
    """``torch.cdist(x, y, p=1)`` and cdist's own gradient (``_cdist_backward``, the two calls torch's autograd
    makes); under create_graph the gradient of ``l1_grad_blocks`` instead, which is differentiable (cdist's backward
    has no derivative: a second derivative of kernel ``torch`` failed inside torch). x, y of one batch shape."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cdist(x, y, p=1)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs, output)
        ctx.save_for_forward(*inputs, output)  # the same tensors as for the backward: vmap's rule needs that

    @staticmethod
    def jvp(ctx, x_t, y_t):
        return l1_tangent(*ctx.saved_tensors[:2], x_t, y_t, CHUNK_BYTES)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, y, out = ctx.saved_tensors
        if torch.is_grad_enabled():
            return l1_grad_blocks(x, y, grad, CHUNK_BYTES)
        grad = grad.to(x.dtype).contiguous()
        return (torch.ops.aten._cdist_backward(grad, x, y, 1.0, out),
                torch.ops.aten._cdist_backward(grad.mT.contiguous(), y, x, 1.0, out.mT.contiguous()))


def cdist_l1(x: torch.Tensor, y: torch.Tensor, chunk_bytes: int | None = None) -> torch.Tensor:
    """``torch.cdist(x, y, p=1)``: (..., la, d), (..., lb, d) -> (..., la, lb) (``chunk_bytes`` unused), twice
    differentiable (``_L1DistanceCdist``)."""
    del chunk_bytes
    return _L1DistanceCdist.apply(*_expanded(x, y))


def chunked_l1(x: torch.Tensor, y: torch.Tensor, chunk_bytes: int | None = None) -> torch.Tensor:
    """cdist forward, backward in blocks of at most ``chunk_bytes`` (None: ``CHUNK_BYTES``)."""
    return _L1DistanceChunked.apply(*_expanded(x, y), CHUNK_BYTES if chunk_bytes is None else chunk_bytes)


def numba_l1(x: torch.Tensor, y: torch.Tensor, chunk_bytes: int | None = None) -> torch.Tensor:
    """The numba kernels, forward and backward (float32/float64 CPU tensors; ``chunk_bytes`` unused)."""
    del chunk_bytes
    return _l1_numba(*_expanded(x, y))
