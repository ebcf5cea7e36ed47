"""Input checks shared by CoDA's entry points (``coda_attention``, ``CoDAScoring``, ``coda_matrix``,
``coda_components``): one ValueError naming the caller, the argument and what was expected, instead of a raw torch
error deep in a kernel (an int mask: "where expected condition to be a boolean tensor"; mixed dtypes: "expected
scalar type Float but found Double"; a mask of the wrong shape: "The expanded size ...") or, for mixed dtypes on
the flash path, a silent cast. A leaf of the attention package (torch and ``shapes`` only).
"""

from __future__ import annotations

import torch

from coda_exp.attention.shapes import broadcast_shapes


def described(t) -> str:
    """``torch.float32 (2, 5, 8)`` of a tensor, the type's name of anything else (for error messages)."""
    return f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__


def check_tensors(caller: str, named: dict, together: str) -> tuple[int, ...]:
    """The given (not None) tensors of ``named`` are floating (..., L, d) tensors of one dtype and device whose batch
    dimensions broadcast; their broadcast batch shape. ``together`` names them in the messages ("q, k, v")."""
    for name, t in named.items():
        if t is not None and (not isinstance(t, torch.Tensor) or t.dim() < 2 or not t.is_floating_point()):
            raise ValueError(f"{caller}: {name} must be a floating tensor (..., L, d), got {described(t)}")
    given = {name: t for name, t in named.items() if t is not None}
    for what, attr in (("share one dtype", "dtype"), ("be on one device", "device")):
        values = {name: getattr(t, attr) for name, t in given.items()}
        if len(set(values.values())) > 1:
            raise ValueError(f"{caller}: {together} must {what}, got "
                             f"{', '.join(f'{n}={v}' for n, v in values.items())}")
    try:
        return tuple(broadcast_shapes(*(t.shape[:-2] for t in given.values())))
    except RuntimeError:
        raise ValueError(f"{caller}: the batch dimensions of " + ", ".join(
            f"{n} {tuple(t.shape[:-2])}" for n, t in given.items()) + " do not broadcast") from None


def check_mask(caller: str, name: str, mask, want: tuple[int, int], lead: tuple[int, ...]) -> None:
    """``mask`` (None: nothing to check) is a bool tensor broadcastable to (*lead, *want)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"{caller}: {name} must be a bool tensor (True = valid), got "
                         f"{mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__}")
    ok = mask.dim() >= 2 and all(a in (1, b) for a, b in zip(mask.shape[-2:], want))
    try:
        broadcast_shapes(mask.shape[:-2], lead)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{caller}: {name} of shape {tuple(mask.shape)} does not broadcast to "
                         f"(..., {want[0]}, {want[1]}) with batch dimensions {tuple(lead)}")


def check_matrix_inputs(e_a, e_b, n_a, n_b, mask=None, caller: str = "coda_matrix") -> None:
    """The inputs of ``coda_matrix`` / ``coda_components``: e_a (..., la, de), e_b (..., lb, de), n_a (..., la, dn),
    n_b (..., lb, dn), floating, one dtype and device; mask bool broadcastable to (..., la, lb)."""
    lead = check_tensors(caller, {"e_a": e_a, "e_b": e_b, "n_a": n_a, "n_b": n_b}, "e_a, e_b, n_a, n_b")
    la, lb = e_a.shape[-2], e_b.shape[-2]
    if e_a.shape[-1] != e_b.shape[-1] or n_a.shape[-1] != n_b.shape[-1] or (n_a.shape[-2], n_b.shape[-2]) != (la, lb):
        raise ValueError(f"{caller}: e_a {tuple(e_a.shape)}, e_b {tuple(e_b.shape)}, n_a {tuple(n_a.shape)}, n_b "
                         f"{tuple(n_b.shape)} must be (..., la, de), (..., lb, de), (..., la, dn), (..., lb, dn)")
    check_mask(caller, "mask", mask, (la, lb), lead)
