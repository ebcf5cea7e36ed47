"""Accuracy that counts each example once across processes (DDP's sampler pads shards with repeats)."""

from __future__ import annotations

import torch
from torchmetrics import Metric

from coda_exp.metrics.states import cat_state, first_occurrence


class IndexedAccuracy(Metric):
    """Fraction of correct predictions, each example id counted once.

    ``update(preds, target, index)``: ``index`` identifies the example in its split. Under DDP the distributed
    sampler pads the shards with repeats of a few examples so that every process gets as many batches;
    ``torchmetrics.Accuracy`` counts those twice, this metric keeps the first occurrence of each id (the states are
    concatenated across processes before ``compute``). On one process it equals plain accuracy.
    """

    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("correct", default=[], dist_reduce_fx="cat")
        self.add_state("index", default=[], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, target: torch.Tensor, index: torch.Tensor) -> None:
        if not preds.shape == target.shape == index.shape:
            raise ValueError(f"preds, target and index must have one shape, got {tuple(preds.shape)}, "
                             f"{tuple(target.shape)}, {tuple(index.shape)}")
        self.correct.append((preds == target).detach())
        self.index.append(index.detach().long())

    def compute(self) -> torch.Tensor:
        if isinstance(self.correct, list) and not self.correct:
            return torch.tensor(0.0)
        correct, index = cat_state(self.correct), cat_state(self.index)
        return correct[first_occurrence(index)].float().mean()
