"""Pair classification (NLI): cross-entropy over the labels, accuracy."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torchmetrics

from coda_exp.tasks.base import TaskModule


class PairClassificationTask(TaskModule):
    """Logs ``{train,val,test}/loss`` and ``{val,test}/acc`` (a fraction in [0, 1])."""

    def __init__(self, model, optimizer, num_classes: int, **kwargs):
        super().__init__(model, optimizer, **kwargs)
        self.num_classes = num_classes
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.test_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self(batch), batch["label"])
        self.log_loss("train", loss, batch["label"].numel())
        return loss

    def _eval_step(self, batch, stage: str, metric: torchmetrics.Metric) -> torch.Tensor:
        logits = self(batch)
        loss = F.cross_entropy(logits, batch["label"])
        metric.update(logits.argmax(-1), batch["label"])
        self.log_loss(stage, loss, batch["label"].numel())
        self.log(f"{stage}/acc", metric, on_epoch=True, prog_bar=True, batch_size=batch["label"].numel())
        return logits

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val", self.val_acc)

    def test_step(self, batch, batch_idx):
        logits = self._eval_step(batch, "test", self.test_acc)
        self.buffer_predictions(index=batch["index"], label=batch["label"], prediction=logits.argmax(-1))
