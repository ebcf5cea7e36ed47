"""The Triton kernels' arguments as the host builds them (``flash_triton``'s helpers, no Triton needed): padded
feature dims, power-of-two length buckets (the autotune key), the scalars tensor (made once per set of values, no
host copy per call) and masks in the dtype the kernels read."""

from __future__ import annotations

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
