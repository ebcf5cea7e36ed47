"""Helpers for torchmetrics list states that may be concatenated across processes (DDP)."""

from __future__ import annotations

import torch


def cat_state(state: list[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """A list state as one tensor (after a DDP sync torchmetrics has already concatenated it)."""
    return torch.cat(state) if isinstance(state, list) else state


def first_occurrence(ids: torch.Tensor) -> torch.Tensor:
    """Bool mask (same shape as the 1-D ``ids``): True at the first position of each id, False at its repeats.

    Under DDP the distributed sampler pads the shards with repeats of a few examples; a metric that keeps only
    these positions counts each example once."""
    order = torch.argsort(ids, stable=True)  # a stable sort keeps the first position of each id first
    ids_sorted = ids[order]
    first_sorted = torch.ones_like(ids_sorted, dtype=torch.bool)
    first_sorted[1:] = ids_sorted[1:] != ids_sorted[:-1]
    first = torch.empty_like(first_sorted)
    first[order] = first_sorted
    return first
