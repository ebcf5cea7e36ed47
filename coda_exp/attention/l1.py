"""Pairwise L1 distance without a (..., la, lb, d) temporary: the N affinity of CoDA (Tay et al. 2019, eq. 2).

``l1_distance(x, y)[..., i, j] = sum_k |x[..., i, k] - y[..., j, k]|``.

Two backends, chosen per call by ``backend=`` or the ``CODA_L1_BACKEND`` environment variable
(``auto`` | ``numba`` | ``torch``, default ``auto``):

* ``torch``: ``torch.cdist(x, y, p=1)`` and its autograd. Reference and fallback; works on every device/dtype and
  supports double backward. Slow on CPU (its backward dominates CoDA's cost).
* ``numba``: a ``torch.autograd.Function`` with fused, parallel numba kernels (float32/float64 CPU tensors only).
  Forward: for each slice, y is transposed once to (d, lb) so the innermost loop runs over contiguous j.
  Backward: dX_ik = sum_j G_ij sign(x_ik - y_jk) and dY_jk = -sum_i G_ij sign(x_ik - y_jk) in one pass per slice,
  two rows of x at a time (shares the y_j loads and the dY_j updates), innermost loop over contiguous k,
  pairs with G_ij = 0 (masked / causal) skipped. Extra memory: O(lb * d) per thread. sign(0) = 0, as in
  torch.cdist's gradient. First-order only (double backward raises).

``auto`` uses numba for float32/float64 CPU tensors when numba imports, torch otherwise (CUDA, half precision...).
Kernels are compiled on first use per dtype (a few seconds) and cached on disk (``cache=True``).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch.autograd.function import once_differentiable

BACKENDS = ("auto", "numba", "torch")
ENV_VAR = "CODA_L1_BACKEND"

try:  # numba is a declared dependency, but the torch path must work without it
    import numba
    from numba import njit, prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only on installs without numba
    HAVE_NUMBA = False

_NUMBA_DTYPES = (torch.float32, torch.float64)

if HAVE_NUMBA:
    # reassoc lets LLVM vectorise the forward sums; the comparisons below stay exact.
    _FASTMATH = {"nnan", "ninf", "nsz", "arcp", "contract", "reassoc"}

    @njit(parallel=True, fastmath=_FASTMATH, cache=True)
    def _l1_forward_kernel(x, y, out):  # pragma: no cover - compiled
        """x (S, la, d), y (S, lb, d) -> out (S, la, lb) = sum_k |x_ik - y_jk|."""
        n_slices, la, d = x.shape
        lb = y.shape[1]
        for s in prange(n_slices):
            yt = np.empty((d, lb), dtype=x.dtype)  # y_s transposed: contiguous over j
            for j in range(lb):
                for k in range(d):
                    yt[k, j] = y[s, j, k]
            row = np.empty(lb, dtype=x.dtype)
            for i in range(la):
                row[:] = 0
                for k in range(d):
                    xv = x[s, i, k]
                    for j in range(lb):
                        row[j] += abs(xv - yt[k, j])
                for j in range(lb):
                    out[s, i, j] = row[j]

    @njit(parallel=True, fastmath=_FASTMATH, cache=True)
    def _l1_backward_kernel(x, y, g, dx, dy):  # pragma: no cover - compiled
        """dx_ik = sum_j g_ij sign(x_ik - y_jk); dy_jk = -sum_i g_ij sign(x_ik - y_jk); sign(0) = 0.

        x (S, la, d), y (S, lb, d), g (S, la, lb); dx, dy written in full. ``zero = g - g`` keeps every
        literal in the input dtype (an int 0 would promote float32 selects to float64 and halve the SIMD width).
        """
        n_slices, la, d = x.shape
        lb = y.shape[1]
        for s in prange(n_slices):
            acc = np.zeros((2, d), dtype=x.dtype)  # dx rows i, i+1
            dys = np.zeros((lb, d), dtype=x.dtype)  # dy of this slice
            for i in range(0, la - 1, 2):
                acc[:] = 0
                for j in range(lb):
                    ga = g[s, i, j]
                    gb = g[s, i + 1, j]
                    if ga == 0 and gb == 0:
                        continue
                    zero = ga - ga
                    for k in range(d):
                        yv = y[s, j, k]
                        da = x[s, i, k] - yv
                        db = x[s, i + 1, k] - yv
                        ta = ga if da > zero else (-ga if da < zero else zero)
                        tb = gb if db > zero else (-gb if db < zero else zero)
                        acc[0, k] += ta
                        acc[1, k] += tb
                        dys[j, k] -= ta + tb
                for k in range(d):
                    dx[s, i, k] = acc[0, k]
                    dx[s, i + 1, k] = acc[1, k]
            if la % 2 == 1:
                i = la - 1
                acc[:] = 0
                for j in range(lb):
                    ga = g[s, i, j]
                    if ga == 0:
                        continue
                    zero = ga - ga
                    for k in range(d):
                        da = x[s, i, k] - y[s, j, k]
                        ta = ga if da > zero else (-ga if da < zero else zero)
                        acc[0, k] += ta
                        dys[j, k] -= ta
                for k in range(d):
                    dx[s, i, k] = acc[0, k]
            for j in range(lb):
                for k in range(d):
                    dy[s, j, k] = dys[j, k]


def _set_numba_threads() -> None:
    """Use as many numba threads as torch does (never more than numba was started with)."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))


def _as_slices(t: torch.Tensor) -> np.ndarray:
    """(..., l, d) tensor -> C-contiguous (S, l, d) numpy view/copy."""
    return t.detach().reshape(math.prod(t.shape[:-2]), t.shape[-2], t.shape[-1]).contiguous().numpy()


class _L1DistanceNumba(torch.autograd.Function):
    """Custom autograd for the numba backend; x, y already expanded to the same batch shape."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        xs, ys = _as_slices(x), _as_slices(y)  # (S, la, d), (S, lb, d)
        out = np.empty((xs.shape[0], xs.shape[1], ys.shape[1]), dtype=xs.dtype)  # (S, la, lb)
        if out.size:
            _set_numba_threads()
            _l1_forward_kernel(xs, ys, out)
        ctx.save_for_backward(x, y)
        return torch.from_numpy(out).reshape(x.shape[:-1] + (y.shape[-2],))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, y = ctx.saved_tensors
        xs, ys = _as_slices(x), _as_slices(y)
        gs = grad.reshape(xs.shape[0], xs.shape[1], ys.shape[1]).to(x.dtype).contiguous().numpy()  # (S, la, lb)
        dx = np.zeros_like(xs)
        dy = np.zeros_like(ys)
        if xs.size and ys.size:
            _set_numba_threads()
            _l1_backward_kernel(xs, ys, gs, dx, dy)
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
