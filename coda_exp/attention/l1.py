"""Pairwise L1 distance without a (..., la, lb, d) temporary: the N affinity of CoDA (Tay et al. 2019, eq. 2).

``l1_distance(x, y)[..., i, j] = sum_k |x[..., i, k] - y[..., j, k]|``.

Two backends, chosen per call by ``backend=`` or the ``CODA_L1_BACKEND`` environment variable
(``auto`` | ``numba`` | ``torch``, default ``auto``):

* ``torch``: ``torch.cdist(x, y, p=1)`` and its autograd. Reference and fallback; works on every device/dtype and
  supports double backward. Slow on CPU (its backward dominates CoDA's cost).
* ``numba``: a ``torch.autograd.Function`` over the parallel numba kernels of ``_kernels`` (float32/float64 CPU
  tensors only), ``prange`` over the batch x heads slices. Forward: y transposed once per slice to (d, lb), four
  rows of x per block, innermost loop over contiguous j. Backward: dX_ik = sum_j G_ij sign(x_ik - y_jk) and
  dY_jk = -sum_i G_ij sign(x_ik - y_jk) in one pass per slice, four rows at a time, innermost loop over contiguous
  j (dX a vector reduction, dY kept transposed and shared by the block), only the span of j where G != 0
  (masked / causal pairs skipped). Extra memory: O(lb * d) per thread. sign(0) = 0, as in torch.cdist's gradient.
  First-order only (double backward raises).

``auto`` uses numba for float32/float64 CPU tensors when numba imports, torch otherwise (CUDA, half precision...).
Kernels are compiled on first use per dtype (a few seconds) and cached on disk (``cache=True``).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from coda_exp.attention import _kernels

BACKENDS = ("auto", "numba", "torch")
ENV_VAR = "CODA_L1_BACKEND"
HAVE_NUMBA = _kernels.HAVE_NUMBA
if HAVE_NUMBA:
    import numba

_NUMBA_DTYPES = (torch.float32, torch.float64)


def set_numba_threads() -> None:
    """Use as many numba threads as torch does (never more than numba was started with)."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))


def as_slices(t: torch.Tensor) -> np.ndarray:
    """(..., l, d) tensor -> C-contiguous (S, l, d) numpy view/copy."""
    return t.detach().reshape(math.prod(t.shape[:-2]), t.shape[-2], t.shape[-1]).contiguous().numpy()


class _L1DistanceNumba(torch.autograd.Function):
    """Custom autograd for the numba backend; x, y already expanded to the same batch shape."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        xs, ys = as_slices(x), as_slices(y)  # (S, la, d), (S, lb, d)
        out = np.empty((xs.shape[0], xs.shape[1], ys.shape[1]), dtype=xs.dtype)  # (S, la, lb)
        if out.size:
            set_numba_threads()
            _kernels.l1_forward(xs, ys, out)
        ctx.save_for_backward(x, y)
        return torch.from_numpy(out).reshape(x.shape[:-1] + (y.shape[-2],))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, y = ctx.saved_tensors
        xs, ys = as_slices(x), as_slices(y)
        gs = grad.reshape(xs.shape[0], xs.shape[1], ys.shape[1]).to(x.dtype).contiguous().numpy()  # (S, la, lb)
        dx = np.zeros_like(xs)
        dy = np.zeros_like(ys)
        if xs.size and ys.size:
            set_numba_threads()
            _kernels.l1_backward(xs, ys, gs, dx, dy)
        return torch.from_numpy(dx).reshape(x.shape), torch.from_numpy(dy).reshape(y.shape)


def resolve_backend(x: torch.Tensor, y: torch.Tensor, backend: str | None = None) -> str:
    """The backend ('numba' or 'torch') ``l1_distance`` uses for these tensors.

    ``backend=None`` reads ``CODA_L1_BACKEND`` (default 'auto'). 'numba' silently falls back to 'torch' for
    tensors it cannot handle (CUDA, dtypes other than float32/float64, numba missing).
    """
    choice = backend if backend is not None else os.environ.get(ENV_VAR, "auto")
    if choice not in BACKENDS:
        source = "backend" if backend is not None else ENV_VAR
        raise ValueError(f"{source} must be one of {BACKENDS}, got {choice!r}")
    if choice == "torch":
        return "torch"
    usable = (HAVE_NUMBA and x.device.type == "cpu" and y.device.type == "cpu"
              and x.dtype in _NUMBA_DTYPES and y.dtype == x.dtype)
    return "numba" if usable else "torch"


def l1_distance(x: torch.Tensor, y: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """All-pairs L1 distance: x (..., la, d), y (..., lb, d) -> (..., la, lb); batch dims broadcast.

    Peak memory grows with la*lb, never la*lb*d. See the module docstring for the backends.
    """
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"feature sizes differ: x has d={x.shape[-1]}, y has d={y.shape[-1]}")
    if resolve_backend(x, y, backend) == "torch":
        return torch.cdist(x, y, p=1)
    batch = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x = x.expand(batch + x.shape[-2:])  # autograd sums the gradient back over broadcast dims
    y = y.expand(batch + y.shape[-2:])
    return _L1DistanceNumba.apply(x, y)
