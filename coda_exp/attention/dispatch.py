"""The one place that decides which CoDA kernel runs (Tay et al. 2019, eqs. 1-5; eq. 2's L1 is the costly part).

A kernel is one ``Kernel`` entry in ``REGISTRY``: a name, ``runs`` (can it serve this ``KernelRequest``: device,
dtype, mask, whether the intermediates E, N, f_E(E), f_N(N) must be materialised, whether gradients are needed)
and either ``l1`` (a pairwise L1 distance; the plain PyTorch composition of ``functional`` does the rest) or
``matrix`` (M in one pass, no intermediates). ``select_kernel`` takes the requested name (``CoDAOptions.kernel``,
overridden by the environment variable ``CODA_KERNEL`` when set), returns that kernel when it can run the request,
and otherwise, as for ``auto``, the first entry of ``REGISTRY`` (the priority order) that can. A new kernel (e.g. a
flash-style one) is one more entry here.

Registered kernels, in ``auto``'s order:

* ``flash``: attention only (M V, ``flash.run_coda_attention``), M never stored (``flash``): CPU float32/float64
  with numba, CUDA with Triton; no centring, no matrices requested.
* ``fused``: eqs. 1-5 in one numba pass (``fused.fused_coda_matrix``): float32/float64 CPU, bool CPU mask, no
  centring, no matrices requested for analysis.
* ``numba``: plain composition on the numba L1 kernels (``l1.numba_l1``): float32/float64 CPU.
* ``chunked``: plain composition on cdist with a memory-bounded backward (``l1.chunked_l1``): any device; ``auto``
  takes it off the CPU (CUDA...), where cdist's own backward allocates a (..., lb, la, d) buffer.
* ``torch``: plain composition on ``torch.cdist`` (``l1.cdist_l1``): everything; the all-PyTorch reference.

Every CoDA module remembers the name of the kernel its last forward ran (``kernel_used``); ``kernels_used(model)``
collects them for the run record.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from coda_exp.attention import _kernels
from coda_exp.attention.flash import flash_backend
from coda_exp.attention.fused import fused_coda_matrix
from coda_exp.attention.l1 import NUMBA_DTYPES, cdist_l1, chunked_l1, numba_l1

ENV_VAR = "CODA_KERNEL"  # overrides CoDAOptions.kernel (the config's ``kernel``) everywhere when set and non-empty


@dataclass(frozen=True)
class KernelRequest:
    """What a kernel choice depends on. device: the inputs' device type ("mixed" when they differ); dtype: their
    common dtype (None when they differ); mask_ok: no mask, or a bool mask on the same device; materialise: the
    intermediates are needed (matrices requested, centring, or the L1 distance itself); needs_grad: autograd will
    differentiate the result (a forward-only kernel declares ``runs=lambda r: not r.needs_grad``); output:
    ``matrix`` (M itself) or ``attention`` (M V: a kernel with ``attend`` may skip M, the others materialise it)."""

    device: str
    dtype: torch.dtype | None
    mask_ok: bool = True
    materialise: bool = False
    needs_grad: bool = False
    output: str = "matrix"


def describe(*tensors: torch.Tensor, mask: torch.Tensor | None = None, materialise: bool = False,
             output: str = "matrix") -> KernelRequest:
    """The ``KernelRequest`` of a call on ``tensors`` (and ``mask``) under the current grad mode."""
    devices = {t.device.type for t in tensors}
    dtypes = {t.dtype for t in tensors}
    device = devices.pop() if len(devices) == 1 else "mixed"
    mask_ok = mask is None or (mask.dtype == torch.bool and mask.device.type == device)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    return KernelRequest(device, dtypes.pop() if len(dtypes) == 1 else None, mask_ok, materialise, needs_grad,
                         output)


def _numba_runs(request: KernelRequest) -> bool:
    return _kernels.HAVE_NUMBA and request.device == "cpu" and request.dtype in NUMBA_DTYPES


@dataclass(frozen=True)
class Kernel:
    """One registry entry: ``l1(x, y, chunk_bytes)`` for a composing kernel, ``matrix(e_a, e_b, n_a, n_b, *,
    alpha, beta, e_fn, n_fn, gate_scale, mask)`` for a one-pass kernel, ``attend`` (True) for an attention-only
    kernel (``flash.run_coda_attention`` runs it: M V without M); ``auto`` (default ``runs``): whether ``auto``
    may pick it."""

    name: str
    runs: Callable[[KernelRequest], bool]
    l1: Callable[..., torch.Tensor] | None = None
    matrix: Callable[..., torch.Tensor] | None = None
    auto: Callable[[KernelRequest], bool] | None = None
    attend: bool = False


def _flash_runs(request: KernelRequest) -> bool:
    return (request.output == "attention" and request.mask_ok and not request.materialise
            and flash_backend(request.device, request.dtype) is not None)


REGISTRY: tuple[Kernel, ...] = (
    Kernel("flash", runs=_flash_runs, attend=True),
    Kernel("fused", runs=lambda r: _numba_runs(r) and r.mask_ok and not r.materialise, matrix=fused_coda_matrix),
    Kernel("numba", runs=_numba_runs, l1=numba_l1),
    Kernel("chunked", runs=lambda r: True, l1=chunked_l1, auto=lambda r: r.device != "cpu"),
    Kernel("torch", runs=lambda r: True, l1=cdist_l1),
)
KERNELS = {kernel.name: kernel for kernel in REGISTRY}
KERNEL_CHOICES = ("auto", *KERNELS)


def requested_kernel(configured: str) -> tuple[str, str]:
    """(name, where it came from): ``CODA_KERNEL`` when set and non-empty, else ``configured``; ValueError naming
    the source and the allowed values for an unknown name."""
    env = os.environ.get(ENV_VAR, "").strip()
    name, source = (env, f"environment variable {ENV_VAR}") if env else (configured, "CoDA option kernel")
    if name not in KERNEL_CHOICES:
        raise ValueError(f"{source} must be one of {list(KERNEL_CHOICES)}, got {name!r}")
    return name, source


def select_kernel(configured: str, request: KernelRequest) -> Kernel:
    """The kernel that runs ``request``: the requested one (``CODA_KERNEL`` beats ``configured``) if it can,
    else the first of ``REGISTRY`` that ``auto`` may pick and that can (``torch`` runs everything)."""
    name, _ = requested_kernel(configured)
    if name != "auto" and KERNELS[name].runs(request):
        return KERNELS[name]
    return next(k for k in REGISTRY if k.runs(request) and (k.auto is None or k.auto(request)))


def l1_distance(x: torch.Tensor, y: torch.Tensor, kernel: str = "auto",
                chunk_bytes: int | None = None) -> torch.Tensor:
    """All-pairs L1 distance (eq. 2 without -beta): x (..., la, d), y (..., lb, d) -> (..., la, lb), batch dims
    broadcast, computed by the L1 of the kernel ``select_kernel`` picks (``fused`` has none: ``auto`` then).

    Peak memory grows with la*lb, never la*lb*d (except ``torch``'s CUDA backward); ``chunk_bytes`` bounds the
    ``chunked`` backward's temporary (None: ``l1.CHUNK_BYTES``).
    """
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"feature sizes differ: x has d={x.shape[-1]}, y has d={y.shape[-1]}")
    if chunk_bytes is not None and not (isinstance(chunk_bytes, int) and chunk_bytes > 0):
        raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    return select_kernel(kernel, describe(x, y, materialise=True)).l1(x, y, chunk_bytes)


def kernels_used(model: nn.Module) -> list[str]:
    """Sorted unique names of the kernels the last forward of each CoDA module of ``model`` ran (its
    ``kernel_used``); empty for a model without CoDA (softmax) or whose CoDA modules have not run yet."""
    names = {getattr(module, "kernel_used", None) for module in model.modules()}
    return sorted(name for name in names if isinstance(name, str))
