"""Pair classification (NLI): cross-entropy over the labels, accuracy."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from coda_exp.metrics import IndexedAccuracy
from coda_exp.tasks.base import TaskModule


def metric_suffixes(test_sets: Sequence[str] | None) -> list[str]:
    """Metric-name suffixes of the test sets: ``[""]`` for one unnamed test set, ``["_matched", ...]`` else."""
    return [""] if not test_sets else [f"_{name}" for name in test_sets]


class PairTask(TaskModule):
    """Sentence-pair families (classification, ranking): ``model(a_ids, a_mask, b_ids, b_mask) -> logits``,
    trained with cross-entropy on ``batch["label"]``."""

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["a_ids"], batch["a_mask"], batch["b_ids"], batch["b_mask"])  # (B, num_classes)

    def train_loss(self, batch):
        return F.cross_entropy(self(batch), batch["label"]), batch["label"].numel()


class PairClassificationTask(PairTask):
    """Logs ``{train,val,test}/loss`` and ``{val,test}/acc`` (a fraction in [0, 1]).

    With several test sets (``test_sets=["matched", "mismatched"]``: MNLI, one test dataloader each, in that
    order) the test metrics are ``test/acc_matched``, ``test/loss_matched``, ...; every test prediction row then
    carries its ``test_set`` name.
    """
    FAMILY = "pair_classification"

    @classmethod
    def validation_metrics(cls, options: dict) -> set[str]:
        return {"loss", "acc"}

    def __init__(self, model, optimizer, num_classes: int, test_sets: Sequence[str] | None = None, **kwargs):
        super().__init__(model, optimizer, **kwargs)
        self.num_classes = num_classes
        self.test_sets = list(test_sets or [])
        # each example once even under DDP (the sampler's padding repeats are not counted twice)
        self.val_acc = IndexedAccuracy()
        self.test_accs = torch.nn.ModuleList(IndexedAccuracy() for _ in metric_suffixes(self.test_sets))
        self.test_acc = self.test_accs[0]
        self.add_means("val/loss", *(f"test/loss{s}" for s in metric_suffixes(self.test_sets)))

    def _eval_step(self, batch, stage: str, metric: IndexedAccuracy, suffix: str = "") -> torch.Tensor:
        logits = self(batch)
        n = batch["label"].numel()
        metric.update(logits.argmax(-1), batch["label"], batch["index"])
        losses = F.cross_entropy(logits, batch["label"], reduction="none")
        self.log_mean(f"{stage}/loss{suffix}", losses, 1.0, batch["index"])  # each example once, under DDP too
        self.log(f"{stage}/acc{suffix}", metric, on_epoch=True, prog_bar=True, batch_size=n,
                 add_dataloader_idx=False)
        return logits

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx, dataloader_idx: int = 0):
        suffix = metric_suffixes(self.test_sets)[dataloader_idx]
        logits = self._eval_step(batch, "test", self.test_accs[dataloader_idx], suffix)
        extra = {"test_set": torch.full_like(batch["index"], dataloader_idx)} if self.test_sets else {}
        self.buffer_predictions(index=batch["index"], label=batch["label"], prediction=logits.argmax(-1), **extra)

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        name_test_sets(self.test_predictions, self.test_sets)

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> list[dict]:
        """``index``, ``prediction`` (the class id) and ``probabilities`` (softmax over the classes) per example."""
        return class_predictions(self(batch), batch["index"])


def class_predictions(logits: torch.Tensor, index: torch.Tensor) -> list[dict]:
    """Prediction rows of a classifier: ``index``, ``prediction`` (argmax) and ``probabilities`` (softmax)."""
    probs = logits.float().softmax(-1)
    return [{"index": i, "prediction": k, "probabilities": p}
            for i, k, p in zip(index.tolist(), probs.argmax(-1).tolist(), probs.tolist())]


def name_test_sets(rows: list[dict], test_sets: list[str]) -> None:
    """Replace the ``test_set`` index of each prediction row by its name."""
    for row in rows:
        if "test_set" in row:
            row["test_set"] = test_sets[row["test_set"]]
