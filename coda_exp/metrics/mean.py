"""A weighted mean over examples that counts each example once across processes (losses, token accuracies)."""

from __future__ import annotations

import torch
from torchmetrics import Metric

from coda_exp.metrics.states import cat_state, first_occurrence


class IndexedMean(Metric):
    """``sum(total) / sum(weight)`` over the examples seen, each example id counted once.

    ``update(total, weight, index)``, one entry per example: ``total`` its sum (its mean times its weight: the
    summed token losses of a sequence, one example's loss), ``weight`` what it counts for (its tokens, 1, 0 for an
    example without a target), ``index`` its id in the split. A per-batch mean logged with ``sync_dist=True`` is
    averaged over the processes with equal weight, whatever each process held, and counts the repeats the
    distributed sampler pads the shards with; this metric concatenates every process's states before ``compute``
    and keeps the first occurrence of each id, so the value is the one-process value for any number of processes
    (up to float order). Sums are kept in float64.
    """

    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", default=[], dist_reduce_fx="cat")
        self.add_state("weight", default=[], dist_reduce_fx="cat")
        self.add_state("index", default=[], dist_reduce_fx="cat")

    def update(self, total: torch.Tensor, weight: torch.Tensor, index: torch.Tensor) -> None:
        weight = torch.as_tensor(weight, device=total.device)
        if weight.dim() == 0:
            weight = weight.expand_as(total)
        if not total.shape == weight.shape == index.shape or total.dim() != 1:
            raise ValueError(f"total, weight and index must have one 1-D shape, got {tuple(total.shape)}, "
                             f"{tuple(weight.shape)}, {tuple(index.shape)}")
        self.total.append(total.detach().to(torch.float64))
        self.weight.append(weight.detach().to(torch.float64))
        self.index.append(index.detach().long())

    def compute(self) -> torch.Tensor:
        if isinstance(self.total, list) and not self.total:
            return torch.tensor(float("nan"), dtype=torch.float64)
        index = cat_state(self.index)
        first = first_occurrence(index)
        return cat_state(self.total)[first].sum() / cat_state(self.weight)[first].sum()
