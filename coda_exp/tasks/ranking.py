"""Ranking (answer selection): pointwise training with a binary softmax loss; MAP and MRR per query."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coda_exp.metrics import GroupedRanking
from coda_exp.tasks.base import TaskModule


class RankingTask(TaskModule):
    """The network scores a (query, candidate) pair with two logits (not relevant / relevant), trained with
    cross-entropy (the CoDA paper's "binary softmax loss"). Candidates are ranked per query (``batch["group"]``)
    by ``logit[1] - logit[0]`` (the log-odds, same order as the softmax probability of "relevant").

    Logs ``{val,test}/map`` and ``{val,test}/mrr`` (fractions, :mod:`coda_exp.metrics.ranking`). Queries with no
    relevant candidate are skipped by the metrics (the data module normally drops them for evaluation already: the standard WikiQA protocol).
    """

    def __init__(self, model, optimizer, num_classes: int = 2, **kwargs):
        if num_classes != 2:
            raise ValueError(f"ranking needs binary labels (0 = not relevant, 1 = relevant), got {num_classes} classes")
        super().__init__(model, optimizer, **kwargs)
        self.metrics = torch.nn.ModuleDict({stage: GroupedRanking() for stage in ("val", "test")})

    @staticmethod
    def score(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, 1] - logits[:, 0]

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self(batch), batch["label"])
        self.log_loss("train", loss, batch["label"].numel())
        return loss

    def _eval_step(self, batch, stage: str) -> torch.Tensor:
        logits = self(batch)
        n = batch["label"].numel()
        self.log_loss(stage, F.cross_entropy(logits, batch["label"]), n)
        scores = self.score(logits)
        self.metrics[stage].update(scores, batch["label"], batch["group"])
        return scores

    def _log_epoch(self, stage: str) -> None:
        values = self.metrics[stage].compute()
        self.log_dict({f"{stage}/{k}": v for k, v in values.items()}, prog_bar=True)
        self.metrics[stage].reset()

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def test_step(self, batch, batch_idx):
        scores = self._eval_step(batch, "test")
        self.buffer_predictions(index=batch["index"], group=batch["group"], label=batch["label"], score=scores)

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")
        super().on_test_epoch_end()
