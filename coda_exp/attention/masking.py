"""Boolean masks (True = keep) and masked reductions. Padding never enters a softmax, sum or mean."""

from __future__ import annotations

import torch


def pair_mask(mask_a: torch.Tensor | None, mask_b: torch.Tensor | None) -> torch.Tensor | None:
    """(B, la) and (B, lb) token masks -> (B, la, lb) pair mask, True where both tokens are real."""
    if mask_a is None and mask_b is None:
        return None
    if mask_a is None:
        mask_a = torch.ones(mask_b.shape[:-1] + (1,), dtype=torch.bool, device=mask_b.device)
    if mask_b is None:
        mask_b = torch.ones(mask_a.shape[:-1] + (1,), dtype=torch.bool, device=mask_a.device)
    return mask_a.unsqueeze(-1) & mask_b.unsqueeze(-2)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` ignoring positions where ``mask`` is False.

    Invalid positions get exactly 0; a slice with no valid position is all zeros (never NaN).
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=dim)
    return probs.masked_fill(~mask, 0.0)


def masked_sum(x: torch.Tensor, mask: torch.Tensor | None, dim: int = 1) -> torch.Tensor:
    """Sum of ``x`` (B, L, d) over ``dim`` with padded positions (mask (B, L) False) excluded."""
    if mask is None:
        return x.sum(dim)
    return (x * mask.unsqueeze(-1).to(x.dtype)).sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None, dim: int = 1) -> torch.Tensor:
    """Mean of ``x`` (B, L, d) over valid positions of ``dim``; an all-padding row gives 0."""
    if mask is None:
        return x.mean(dim)
    count = mask.sum(dim, keepdim=True).clamp(min=1).to(x.dtype)  # (B, 1)
    return masked_sum(x, mask, dim) / count


def masked_max(x: torch.Tensor, mask: torch.Tensor | None, dim: int = 1) -> torch.Tensor:
    """Max of ``x`` (B, L, d) over valid positions of ``dim``; an all-padding row gives 0."""
    if mask is None:
        return x.max(dim).values
    filled = x.masked_fill(~mask.unsqueeze(-1), torch.finfo(x.dtype).min)
    out = filled.max(dim).values
    return torch.where(mask.any(dim).unsqueeze(-1), out, torch.zeros_like(out))


def padding_mask(name: str, mask: torch.Tensor | None, shape: torch.Size) -> None:
    """A padding mask is a bool or integer 0/1 tensor (B, L), True = real token; else a ValueError naming it. A float
    mask is refused: PyTorch's additive masks (0 = keep, -inf = pad) would be read inverted."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.is_floating_point() or mask.is_complex():
        raise ValueError(f"{name} must be a bool tensor {tuple(shape)}, True = real token, got "
                         f"{mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__} (an additive float "
                         "mask, 0 = keep and -inf = pad, would read inverted: pass mask == 0)")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} of shape {tuple(mask.shape)}: expected (batch, length) = {tuple(shape)}, True = real "
                         "token")
