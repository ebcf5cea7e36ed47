"""Single-text classification (sentiment, CoDA paper Table 5): cross-entropy over the labels, accuracy."""

from __future__ import annotations

import torch

from coda_exp.optim import label_smoothed_nll
from coda_exp.tasks.classification import PairClassificationTask


class TextClassificationTask(PairClassificationTask):
    """The network reads one text: ``model(ids, mask) -> logits`` (e.g. a Transformer encoder classifier).

    Metrics and test predictions are those of :class:`PairClassificationTask` (a ``TaskModule``):
    ``{train,val,test}/loss`` (plain cross-entropy for val/test), ``{val,test}/acc`` (a fraction in [0, 1]) and one
    buffered prediction per test example ``{"index", "label", "prediction", "length"}`` (``length``: the text's tokens
    before truncation, where the batch has it; AttConv Figure 5 groups by it). Training may use Tensor2Tensor's
    label smoothing (``label_smoothing``: 1 - eps on the gold class, eps / (K - 1) on each other one; T2T's
    ``transformer_tiny`` uses 0.1 for class labels too); 0 is plain cross-entropy.
    """
    FAMILY = "text_classification"

    def __init__(self, model, optimizer, num_classes: int, label_smoothing: float = 0.0, **kwargs):
        super().__init__(model, optimizer, num_classes=num_classes, **kwargs)
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["ids"], batch["mask"])  # (B, num_classes)

    def train_loss(self, batch):
        loss, _ = label_smoothed_nll(self(batch), batch["label"], None, self.label_smoothing)
        return loss, batch["label"].numel()

    def test_step(self, batch, batch_idx, dataloader_idx: int = 0):
        super().test_step(batch, batch_idx, dataloader_idx)
        if "length" in batch:  # joins the prediction row buffered just now
            self._test_buffer[-1]["length"] = batch["length"].detach().cpu()
