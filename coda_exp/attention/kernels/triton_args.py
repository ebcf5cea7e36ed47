"""The Triton kernels' arguments as the host builds them (``flash_triton``'s helpers, no Triton needed): padded
feature dims, power-of-two length buckets (the autotune key), the scalars tensor (made once per set of values, no
host copy per call), masks in the dtype the kernels read, and 16-bit inputs' L1 operands in float16 (``_l1_args``)."""

from __future__ import annotations

import os

import torch

_MIN_DOT = 16  # tl.dot needs every dimension >= 16 on GPUs


def _pad(d: int) -> int:
    return max(_MIN_DOT, _bucket(d))


def _bucket(n: int) -> int:
    """The power of two >= n (>= 1), in Python: triton.next_power_of_2 called from the host runs Triton's JIT wrapper."""
    return 1 << (max(n, 1) - 1).bit_length()


_SCALARS: dict[tuple, torch.Tensor] = {}  # (alpha, beta, gate, scale, dtype, device) -> the kernels' scalar tensor


def _scalars(values: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The kernels' scalars as a device tensor, made once per set of values: ``torch.tensor(..., device="cuda")``
    copies from pageable host memory and synchronises the stream, which every Flash-CoDA call did twice (the host
    waited for the GPU at each attention layer), and a CUDA graph cannot capture. While a graph is captured, a new
    set is filled on the device by kernels (no copy) and not kept: its values exist only once the graph replays."""
    key = (*values, dtype, device)
    found = _SCALARS.get(key)
    if found is not None:
        return found
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return torch.stack([torch.full((), x, dtype=dtype, device=device) for x in values])
    made = torch.tensor(values, dtype=dtype, device=device)
    if len(_SCALARS) < 1024:  # a model has a few sets; a sweep of temperatures in one process, more
        _SCALARS[key] = made
    return made


def _mask_arg(mask: torch.Tensor, wide: bool) -> torch.Tensor:
    """A bool mask as the kernels read it: a uint8 view, which keeps the (possibly 0) strides of an expanded view
    (nothing is materialised); ``wide`` (float64 kernels): int32, converted from the compact tensor under the
    expanded view (its stride-0 dims taken once) and expanded again. Triton 3.6 cannot compile a float64 kernel
    that loads an 8-bit mask for sm_90 (an assertion in its MMAv2 lowering, "fp64 don't support largeK MMA",
    reported as "PassManager::run failed": the i8 tile's layout reaches the float64 tl.dot operands); with 32-bit
    masks every kernel compiles (``tests/attention/kernels/test_flash_triton.py``)."""
    if not wide:
        return mask.view(torch.uint8)
    compact = mask[tuple(slice(0, 1) if st == 0 else slice(None) for st in mask.stride())]
    return compact.to(torch.int32).expand(mask.shape)


# 16-bit inputs' L1 distances (and the fused backward's sign sums: triton_bwd._sign_pairs) from float16 copies of nq,
# nk scaled by a power of two (``_l1_args``); False, or the environment's CODA_FLASH_HALF_L1=0: the inputs as they
# are, in float32 arithmetic (float16 ones as float32 copies)
HALF_L1: bool | None = None
HALF_L1_ENV = "CODA_FLASH_HALF_L1"
_L1_MAX = 2048.0  # |nq|, |nk| after scaling: a float16 chunk sum of DC <= 8 differences stays below 65504


def half_l1() -> bool:
    """``HALF_L1``, else ``CODA_FLASH_HALF_L1`` ("1", default, or "0"); a ValueError for any other value."""
    if HALF_L1 is not None:
        return bool(HALF_L1)
    value = os.environ.get(HALF_L1_ENV, "1")
    if value not in ("0", "1"):
        raise ValueError(f"Flash-CoDA (triton): {HALF_L1_ENV} must be 1 (the L1 distances and sign sums of 16-bit "
                         f"inputs in float16, the default) or 0 (in float32), got {value!r}")
    return value == "1"


def _l1_args(nq: torch.Tensor, nk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(nq, nk, 1 / w) as the kernels read the L1 operands. 16-bit inputs (``half_l1()``): float16 copies of
    nq / w and nk / w, w = 2^e the power of two that brings max |x| to at most 2048 (e from the inputs on the
    device: no host sync, a CUDA graph captures it). Dividing by a power of two and bfloat16 -> float16 are exact
    (8 significant bits in float16's 11) but for values below float16's range (< 2^-24 of 2048: nothing of
    consequence in a sum of absolute values); the kernels sum the chunks' differences in float16 (2^-11 relative
    per operation), take beta w for beta and G / w for the sign sums. float16 inputs without it: float32 copies
    (a float16 nq would be summed in float16 unscaled). Other dtypes: as they are, 1 / w = None (1)."""
    if nq.dtype not in (torch.float16, torch.bfloat16):
        return nq, nk, None
    if not half_l1():
        return (nq, nk, None) if nq.dtype == torch.bfloat16 else (nq.float(), nk.float(), None)
    shared = nk is nq  # shared N: one maximum, one copy
    amax = (nq.abs().amax() if shared else torch.maximum(nq.abs().amax(), nk.abs().amax())).float()
    bounds = (-15.0, 15.0) if nq.dtype == torch.float16 else (-100.0, 100.0)  # 2^-e a normal number of the dtype
    e = torch.ceil(torch.log2(amax.clamp(min=2.0 ** -100) / _L1_MAX)).clamp(*bounds)
    inv_w = torch.exp2(-e)
    typed = inv_w.to(nq.dtype)
    hq = (nq * typed).to(torch.float16)
    return hq, hq if shared else (nk * typed).to(torch.float16), inv_w
