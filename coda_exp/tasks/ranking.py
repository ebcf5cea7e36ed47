"""Ranking (answer / response selection): pointwise training with a binary softmax loss; MAP, MRR, R_N@k."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from coda_exp.metrics import GroupedRanking
from coda_exp.tasks.classification import PairTask, metric_suffixes, name_test_sets


class RankingTask(PairTask):
    """The network scores a (query, candidate) pair with two logits (not relevant / relevant), trained with
    cross-entropy (the CoDA paper's "binary softmax loss"). Candidates are ranked per query (``batch["group"]``)
    by ``logit[1] - logit[0]`` (the log-odds, same order as the softmax probability of "relevant").

    Logs ``{val,test}/<metric>`` for each of ``metrics`` (fractions, :mod:`coda_exp.metrics.ranking`): ``map``
    and ``mrr`` by default (WikiQA, TrecQA), recalls such as ``r10@1``, ``r2@1`` for response selection (UDC).
    Queries with no relevant candidate are skipped by the metrics (the data module normally drops them for
    evaluation already). ``test_sets`` as in :class:`~coda_exp.tasks.PairClassificationTask`.
    """
    FAMILY = "ranking"

    @classmethod
    def validation_metrics(cls, options: dict) -> set[str]:
        return {"loss", *options.get("metrics", ("map", "mrr"))}

    def __init__(self, model, optimizer, num_classes: int = 2, metrics: Sequence[str] = ("map", "mrr"),
                 test_sets: Sequence[str] | None = None, **kwargs):
        if num_classes != 2:
            raise ValueError(f"ranking needs binary labels (0 = not relevant, 1 = relevant), got {num_classes} classes")
        super().__init__(model, optimizer, **kwargs)
        self.metric_names = list(metrics)
        self.test_sets = list(test_sets or [])
        self.suffixes = metric_suffixes(self.test_sets)
        stages = ["val", *(f"test{s}" for s in self.suffixes)]
        self.metrics = torch.nn.ModuleDict({stage: GroupedRanking(self.metric_names) for stage in stages})
        self.add_means("val/loss", *(f"test/loss{s}" for s in self.suffixes))

    @staticmethod
    def score(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, 1] - logits[:, 0]

    def _eval_step(self, batch, stage: str, key: str, suffix: str = "") -> torch.Tensor:
        logits = self(batch)
        self.log_mean(f"{stage}/loss{suffix}", F.cross_entropy(logits, batch["label"], reduction="none"), 1.0,
                      batch["index"])  # each example once, under DDP too
        scores = self.score(logits)
        self.metrics[key].update(scores, batch["label"], batch["group"], batch["index"])
        return scores

    def _log_epoch(self, stage: str, key: str, suffix: str = "") -> None:
        values = self.metrics[key].compute()
        # compute() already gathered every process's states: the values agree, so averaging them changes nothing
        self.log_dict({f"{stage}/{k}{suffix}": v for k, v in values.items()}, prog_bar=True, sync_dist=True,
                      add_dataloader_idx=False)
        self.metrics[key].reset()

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val", "val")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val", "val")

    def test_step(self, batch, batch_idx, dataloader_idx: int = 0):
        suffix = self.suffixes[dataloader_idx]
        scores = self._eval_step(batch, "test", f"test{suffix}", suffix)
        extra = {"test_set": torch.full_like(batch["index"], dataloader_idx)} if self.test_sets else {}
        self.buffer_predictions(index=batch["index"], group=batch["group"], label=batch["label"], score=scores,
                                **extra)

    def on_test_epoch_end(self) -> None:
        for suffix in self.suffixes:
            self._log_epoch("test", f"test{suffix}", suffix)
        super().on_test_epoch_end()
        name_test_sets(self.test_predictions, self.test_sets)

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> list[dict]:
        """``index`` and ``score`` (the log-odds of "relevant": candidates of a query rank by it) per example."""
        return [{"index": i, "score": x} for i, x in zip(batch["index"].tolist(), self.score(self(batch)).tolist())]
