"""The one place that decides which CoDA kernel runs (Tay et al. 2019, eqs. 1-5; eq. 2's L1 is the costly part).

It owns the kernel names, the registry (``REGISTRY``, in ``auto``'s priority order), ``auto``'s size thresholds and
the decision, ``select_kernel(configured, request)``, made once per call: the callers (``attend``, ``functional``)
carry it out and never choose again. A ``KernelRequest`` says what a call needs: device, dtype, mask, centring,
whether the intermediates (maps) are wanted, the output (``matrix`` M, ``attention`` M V, or the ``l1`` distance)
and the size of M.

Registered kernels, in ``auto``'s order:

* ``flash`` (computes M V only, ``kernels.flash``): M never stored; CPU float32/float64 with numba, CUDA with Triton
  (which also centres, in self-attention). ``auto`` takes it on the CPU where M would take at least
  ``CPU_SELF_FLASH_MIN_BYTES`` or a slice has at least ``CPU_FLASH_MIN_LENGTH`` keys (in the cross-attention, which
  computes M twice, from ``CROSS_FLASH_MIN_BYTES``), on CUDA at every size (``SELF_FLASH_MIN_BYTES``) on GPUs
  of compute capability ``FLASH_AUTO_MIN_CAPABILITY`` and newer (``KernelRequest.capability``).
* ``fused`` (computes M only, ``kernels.fused``): eqs. 1-5 in one numba pass; float32/float64 CPU, bool CPU mask,
  no centring.
* ``numba``: the plain composition of ``functional`` on the numba L1 kernels (``kernels.l1.numba_l1``).
* ``chunked``: the plain composition on cdist with a memory-bounded backward (``kernels.l1.chunked_l1``): any device;
  ``auto`` takes it off the CPU (CUDA...), where cdist's own backward allocates a (..., lb, la, d) buffer, and
  under torch.func's differentiating transforms (grad, jacrev, jvp, hessian: ``autograd_transform``), which cannot
  run the custom ops of flash, fused and numba (they are refused there by name; torch.vmap runs them all).
* ``torch``: the plain composition on ``torch.cdist`` (``kernels.l1.cdist_l1``): everything; the reference.

The requested kernel is ``CoDAOptions.kernel``, overridden by the environment variable ``CODA_KERNEL`` when set.
``auto`` takes the first kernel of ``REGISTRY`` that can run the call. A named kernel runs the call or the call is
an error naming the option and why (``KernelUnavailable``), with one exception: a call for what the named kernel
never computes (the maps of an analysis, or the L1 distance, from ``flash`` or ``fused``; M itself from ``flash``)
is ``auto``'s, since those kernels exist to skip exactly that. Centring with ``flash`` or ``fused`` is refused when
the options are built (``configuration_error``).

Every CoDA module remembers the name of the kernel its last forward ran (``kernel_used``); ``kernels_used(model)``
collects them for the run record.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from coda_exp.attention.checks import check_tensors
from coda_exp.attention.kernels import numba_cpu
from coda_exp.attention.kernels.flash import flash_backend
from coda_exp.attention.kernels.fused import fused_coda_matrix
from coda_exp.attention.kernels.l1 import NUMBA_DTYPES, cdist_l1, chunked_l1, numba_l1
from coda_exp.attention.precision import cast_back, full_precision, upcast
from coda_exp.attention.shapes import broadcast_shapes

ENV_VAR = "CODA_KERNEL"  # overrides CoDAOptions.kernel (the config's ``kernel``) everywhere when set and non-empty
# On the CPU ``auto`` runs Flash-CoDA in the cross-attention (which computes M twice, once per direction) only from
# this size of M (batch x la x lb x itemsize) up: below, memory is no concern and the one-pass fused kernel is
# faster (DecompAtt, B 64, L 40, d 200: 105 ms fused vs 163 ms flash fwd+bwd, docs/attention.md). ``kernel=flash``
# always runs it.
CROSS_FLASH_MIN_BYTES = 64 << 20
# On CUDA: Flash-CoDA at every size, self- and cross-attention (there is no fused kernel on a GPU: the alternative
# is the materialising ``chunked`` path). On an H200 (results/bench/gpu_h200.json, B.L 16384, H 16, d 64, fwd+bwd
# through coda_attention) flash beat chunked at every length from 32 to 512: bfloat16 3.1 vs 18.5 ms at L 32, 6.1
# vs 140 at L 256; float32 4.7 vs 18.5 at L 32, 5.4 vs 72 at L 128 (with float32's tl.dot as three TF32 products;
# as IEEE FMAs chunked had won at L 32, 18.4 vs 30.8). Maps, the L1 distance and centred cross-attention take the
# materialising path.
SELF_FLASH_MIN_BYTES = 0
# Flash-CoDA's Triton kernels have run on compute capability 9.0 only (H100, H200). They need 7.5 (the 16-bit path's
# tanh.approx; Triton's own floor) and bfloat16 needs 8.0 (Triton's bfloat16 dot): a named kernel=flash below is an
# error naming the GPU. ``auto`` takes them from 8.0 (A100 and newer); below (T4, V100) it takes ``chunked``, which
# runs anywhere, since nothing has checked the kernels there.
FLASH_MIN_CAPABILITY = (7, 5)
FLASH_BF16_MIN_CAPABILITY = FLASH_AUTO_MIN_CAPABILITY = (8, 0)
_CAPABILITIES: dict[int, tuple[int, int]] = {}  # CUDA device index -> compute capability, asked once per device
# On the CPU (scripts/bench_crossover.py, fwd+bwd with a dense upstream gradient, 2 cores:
# results/bench/crossover_cpu_2core.json, commit e1c6774) Flash-CoDA is faster wherever a slice is long (L >= 1024:
# 0.67-0.99x the fused kernel's time) or M is large (>= 32 MiB: 0.75-0.93x; it also stores no L x L matrix); the
# fused kernel's one pass wins where slices are short and many (32 x 128: flash 1.24x, 256 x 128: 1.17x) and is
# about even with it elsewhere (4-32 slices of 256-512: 1.03-1.04x). ``auto`` follows that.
CPU_SELF_FLASH_MIN_BYTES = 32 << 20
CPU_FLASH_MIN_LENGTH = 1024
OUTPUTS = ("matrix", "attention", "l1")


class KernelUnavailable(ValueError):
    """A kernel named by the configuration (or ``CODA_KERNEL``) cannot run a call."""


@dataclass(frozen=True)
class KernelRequest:
    """What a kernel choice depends on. device: the inputs' device type ("mixed" when they differ); dtype: their
    common dtype (None when they differ); mask_ok: no mask, or a bool mask on the same device; centred: E or N is
    mean-centred (eqs. 4, 6); maps: the intermediates E, N, f_E(E), f_N(N) are wanted (an analysis); needs_grad:
    autograd will differentiate the result; output: ``matrix`` (M), ``attention`` (M V) or ``l1`` (the distance
    alone); matrix_bytes: the size of M; cross: a cross-attention (M computed once per direction); key_length: Lk, the
    length of a slice's key side; autograd_transform: a torch.func transform that differentiates (grad, vjp,
    jacrev, jvp, hessian) is active, which the custom ops of flash, fused and numba cannot run under; capability: the
    CUDA compute capability of the inputs' GPU (None off CUDA, or not known)."""

    device: str
    dtype: torch.dtype | None
    mask_ok: bool = True
    centred: bool = False
    maps: bool = False
    needs_grad: bool = False
    output: str = "matrix"
    matrix_bytes: int = 0
    cross: bool = False
    key_length: int = 0
    autograd_transform: bool = False
    capability: tuple[int, int] | None = None

    def __post_init__(self):
        if self.output not in OUTPUTS:
            raise ValueError(f"KernelRequest output must be one of {list(OUTPUTS)}, got {self.output!r}")


def autograd_transform() -> bool:
    """Whether a torch.func transform that differentiates (grad, vjp, jacrev: Grad; jvp, jacfwd: Jvp) is active.
    Not under torch.compile (dynamo traces the decision as plain Python; the stack is functorch's, not traced)."""
    if torch.compiler.is_compiling():
        return False
    stack = torch._C._functorch.get_interpreter_stack() or ()
    kinds = (torch._C._functorch.TransformType.Grad, torch._C._functorch.TransformType.Jvp)
    return any(interpreter.key() in kinds for interpreter in stack)


def describe(*tensors: torch.Tensor, mask: torch.Tensor | None = None, centred: bool = False, maps: bool = False,
             output: str = "matrix", cross: bool = False) -> KernelRequest:
    """The ``KernelRequest`` of a call on ``tensors`` (the first two: the two sides of M, (..., la, d) and
    (..., lb, d)) and ``mask``, under the current grad mode."""
    devices = {t.device.type for t in tensors}
    dtypes = {t.dtype for t in tensors}
    device = devices.pop() if len(devices) == 1 else "mixed"
    mask_ok = mask is None or (mask.dtype == torch.bool and mask.device.type == device)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    size = key_length = 0
    if len(tensors) >= 2:
        a, b = tensors[:2]
        try:
            slices = math.prod(broadcast_shapes(a.shape[:-2], b.shape[:-2]))
            size, key_length = slices * a.shape[-2] * b.shape[-2] * a.element_size(), b.shape[-2]
        except (RuntimeError, IndexError):  # shapes that do not pair: the kernel's own check names them
            size = key_length = 0
    return KernelRequest(device, dtypes.pop() if len(dtypes) == 1 else None, mask_ok, centred, maps, needs_grad,
                         output, size, cross, key_length, autograd_transform(),
                         cuda_capability(tensors[0].device) if device == "cuda" and tensors else None)


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of CUDA ``device``, asked of the driver once per device (under torch.compile only
    what an eager call has asked already: None, no restriction, before that)."""
    if torch.compiler.is_compiling():
        return _CAPABILITIES.get(device.index if device.index is not None else 0)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _CAPABILITIES:
        _CAPABILITIES[index] = tuple(torch.cuda.get_device_capability(index))
    return _CAPABILITIES[index]


def _transform_missing(request: KernelRequest) -> str | None:
    if request.autograd_transform:
        return ("it runs as torch.library custom ops, which torch.func's differentiating transforms (grad, vjp, "
                "jacrev, jvp, hessian) cannot run (torch.vmap can): use kernel=chunked")
    return None


def _numba_missing(request: KernelRequest) -> str | None:
    if why := _transform_missing(request):
        return why
    if not numba_cpu.HAVE_NUMBA:
        return "numba is not installed"
    if request.device != "cpu":
        return f"it runs on CPU tensors, these are on {request.device}"
    if request.dtype not in NUMBA_DTYPES:
        return f"it runs float32/float64, these are {request.dtype or 'of mixed dtypes'}"
    return None


def _mask_missing(request: KernelRequest) -> str | None:
    return None if request.mask_ok else "its mask must be a bool tensor on the inputs' device"


def _flash_missing(request: KernelRequest) -> str | None:
    if why := _transform_missing(request):
        return why
    if request.centred and (request.device != "cuda" or request.cross):
        return ("Flash-CoDA centres (center_e / center_n) in CUDA self-attention only: its numba CPU backend does not "
                "centre, and a cross-attention's second side (M^T, rows of M's columns) cannot reuse row means")
    if flash_backend(request.device, request.dtype) is None:
        return (f"no Flash-CoDA backend for {request.device} {request.dtype} tensors (CPU float32/float64 with "
                "numba, CUDA with Triton)")
    return capability_problem(request.capability, request.dtype == torch.bfloat16) or _mask_missing(request)


def capability_problem(capability: tuple[int, int] | None, bfloat16: bool) -> str | None:
    """Why Flash-CoDA's Triton kernels cannot run on a GPU of compute ``capability`` (with bfloat16 inputs or not),
    or None (also where the capability is not known)."""
    def version(cap):
        return f"{cap[0]}.{cap[1]}"

    if capability is None:
        return None
    if capability < FLASH_MIN_CAPABILITY:
        return (f"its Triton kernels need a GPU of compute capability {version(FLASH_MIN_CAPABILITY)} or newer, "
                f"this one is {version(capability)}")
    if bfloat16 and capability < FLASH_BF16_MIN_CAPABILITY:
        return (f"bfloat16 needs a GPU of compute capability {version(FLASH_BF16_MIN_CAPABILITY)} or newer "
                f"(Triton's bfloat16 dot), this one is {version(capability)}")
    return None


def _fused_missing(request: KernelRequest) -> str | None:
    if request.centred:
        return "the fused kernel does not centre (center_e / center_n need E and N materialised)"
    return _numba_missing(request) or _mask_missing(request)


@dataclass(frozen=True)
class Kernel:
    """One registry entry. computes: ``attention`` (M V only: flash), ``matrix`` (M only: fused) or ``l1`` (the
    L1 distance, the plain composition of ``functional`` doing the rest: everything). missing(request): why it
    cannot run a call it computes for, or None. ``l1(x, y, chunk_bytes)`` for a composing kernel, ``matrix(e_a,
    e_b, n_a, n_b, *, alpha, beta, e_fn, n_fn, gate_scale, mask)`` for a one-pass kernel. auto(request): whether
    ``auto`` may pick it (default: wherever it runs). centres: whether it can run centred configurations."""

    name: str
    computes: str
    missing: Callable[[KernelRequest], str | None]
    l1: Callable[..., torch.Tensor] | None = None
    matrix: Callable[..., torch.Tensor] | None = None
    auto: Callable[[KernelRequest], bool] | None = None
    centres: bool = True

    def serves(self, request: KernelRequest) -> bool:
        """Whether the call asks for what this kernel computes (flash: M V; fused: M or M V; the rest: all)."""
        if self.computes == "attention":
            return request.output == "attention" and not request.maps
        if self.computes == "matrix":
            return request.output != "l1" and not request.maps
        return True

    def runs(self, request: KernelRequest) -> bool:
        return self.serves(request) and self.missing(request) is None


def _flash_big_enough(request: KernelRequest) -> bool:
    if request.device != "cpu":  # CUDA: self- and cross-attention alike, on the GPU generations checked
        return request.matrix_bytes >= SELF_FLASH_MIN_BYTES and (
            request.capability is None or request.capability >= FLASH_AUTO_MIN_CAPABILITY)
    if request.cross:
        return request.matrix_bytes >= CROSS_FLASH_MIN_BYTES
    return request.matrix_bytes >= CPU_SELF_FLASH_MIN_BYTES or request.key_length >= CPU_FLASH_MIN_LENGTH


REGISTRY: tuple[Kernel, ...] = (
    Kernel("flash", "attention", _flash_missing, auto=_flash_big_enough),  # centres on CUDA (_flash_missing)
    Kernel("fused", "matrix", _fused_missing, matrix=fused_coda_matrix, centres=False),
    Kernel("numba", "l1", _numba_missing, l1=numba_l1),
    # off the CPU, and under torch.func's grad transforms (twice differentiable, written for torch.func)
    Kernel("chunked", "l1", lambda r: None, l1=chunked_l1, auto=lambda r: r.device != "cpu" or r.autograd_transform),
    Kernel("torch", "l1", lambda r: None, l1=cdist_l1),
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


def configuration_error(kernel: str, centred: bool) -> str | None:
    """Why the option ``kernel`` cannot serve a configuration (centring with flash or fused), or None."""
    if kernel in KERNELS and centred and not KERNELS[kernel].centres:
        return (f"CoDA option kernel {kernel!r} cannot run centred CoDA (center_e / center_n need the mean of E or "
                f"N over the valid pairs): use one of {[k.name for k in REGISTRY if k.centres]} or 'auto' (flash: "
                "CUDA self-attention only)")
    return None


def select_kernel(configured: str, request: KernelRequest) -> Kernel:
    """The kernel that runs ``request``: the requested one (``CODA_KERNEL`` beats ``configured``), or for ``auto``
    (and for a call the named kernel never computes for) the first of ``REGISTRY`` that ``auto`` may pick and that
    can run it (``torch`` runs everything). A named kernel that cannot run the call: ``KernelUnavailable``."""
    name, source = requested_kernel(configured)
    if name != "auto" and KERNELS[name].serves(request):
        kernel = KERNELS[name]
        why = kernel.missing(request)
        if why is not None:
            raise KernelUnavailable(f"{source} is {name!r}, which cannot run this call: {why}. Choose another "
                                    f"kernel or 'auto' ({list(KERNEL_CHOICES)})")
        return kernel
    return next(k for k in REGISTRY if k.runs(request) and (k.auto is None or k.auto(request)))


def l1_distance(x: torch.Tensor, y: torch.Tensor, kernel: str = "auto",
                chunk_bytes: int | None = None) -> torch.Tensor:
    """All-pairs L1 distance (eq. 2 without -beta): x (..., la, d), y (..., lb, d) -> (..., la, lb), batch dims
    broadcast, computed by the L1 of the kernel ``select_kernel`` picks (``flash`` and ``fused`` have none:
    ``auto`` then).

    Peak memory grows with la*lb, never la*lb*d (except ``torch``'s CUDA backward); ``chunk_bytes`` bounds the
    ``chunked`` backward's temporary (None: ``kernels.l1.CHUNK_BYTES``). float16 / bfloat16 inputs are computed in
    float32 (autocast off) and the distance returned in their dtype, as ``coda_attention`` does (``precision``).
    """
    check_tensors("l1_distance", {"x": x, "y": y}, "x and y")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"feature sizes differ: x has d={x.shape[-1]}, y has d={y.shape[-1]}")
    if chunk_bytes is not None and not (isinstance(chunk_bytes, int) and chunk_bytes > 0):
        raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    with full_precision(x.device):  # float16 / bfloat16: in float32 (cdist has no bfloat16, numba neither)
        x32, y32 = upcast(x, y)
        out = select_kernel(kernel, describe(x32, y32, output="l1")).l1(x32, y32, chunk_bytes)
    return cast_back(out, x.dtype)


def kernels_used(model: nn.Module) -> list[str]:
    """Sorted unique names of the kernels the last forward of each CoDA module of ``model`` ran (its
    ``kernel_used``); empty for a model without CoDA (softmax) or whose CoDA modules have not run yet."""
    names = {getattr(module, "kernel_used", None) for module in model.modules()}
    return sorted(name for name in names if isinstance(name, str))
