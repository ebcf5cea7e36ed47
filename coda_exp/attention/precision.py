"""16-bit inputs for kernels that compute in float32 or float64 (a leaf of the attention package).

``torch.cdist`` has no bfloat16 kernel (CPU or CUDA) and the numba kernels take float32/float64 only, so every CoDA
kernel but the Triton Flash-CoDA (which computes 16-bit inputs in float32 itself) runs float16/bfloat16 inputs
upcast to float32 and returns its result in the inputs' dtype. Autocast is off inside (its 16-bit matmuls would
hand 16-bit tensors to the numba kernels): CoDA computes E, N and M in float32 under ``bf16-mixed`` /
``16-mixed`` as under ``bf16-true``, like the softmax that autocast keeps in float32.
"""

from __future__ import annotations

import contextlib
from dataclasses import fields, replace

import torch

LOW_PRECISION = (torch.float16, torch.bfloat16)
COMPUTE_DTYPE = torch.float32


def full_precision(device: torch.device):
    """Autocast off for ``device`` (cpu, cuda), a no-op context elsewhere."""
    if device.type in ("cpu", "cuda"):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def upcast(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The tensors with float16/bfloat16 ones as float32 (the same object stays the same object: a caller may test
    ``n_a is e_a``); None and other dtypes as they are."""
    done: dict[int, torch.Tensor] = {}
    out = []
    for t in tensors:
        if t is None or t.dtype not in LOW_PRECISION:
            out.append(t)
            continue
        if id(t) not in done:
            done[id(t)] = t.to(COMPUTE_DTYPE)
        out.append(done[id(t)])
    return out


def cast_back(result, dtype: torch.dtype):
    """``result`` (a tensor, or a dataclass of tensors such as ``AttentionMaps``) in ``dtype`` where it was
    upcast from it; bool tensors (masks) and None as they are."""
    if dtype not in LOW_PRECISION:
        return result
    if isinstance(result, torch.Tensor):
        return result.to(dtype) if result.is_floating_point() else result
    changes = {f.name: cast_back(getattr(result, f.name), dtype) for f in fields(result)
               if isinstance(getattr(result, f.name), torch.Tensor)}
    return replace(result, **changes)


def matmul_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype of a matmul with ``t`` under the current autocast: autocast's dtype where autocast is on for
    ``t``'s device and ``t`` is float32 or 16-bit (autocast leaves float64 alone), else ``t``'s own. A CoDA result
    computed in float32 is returned in it, so it has the dtype its softmax counterpart's matmul gives."""
    device = t.device.type
    if device in ("cpu", "cuda") and t.dtype in (COMPUTE_DTYPE, *LOW_PRECISION) and torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return t.dtype
