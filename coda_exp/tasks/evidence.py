"""Claim verification with evidence sentences (FEVER, AttConv Table 9): cross-entropy, accuracy, FEVER score.

The network reads a claim and K evidence sentences: ``model(claim_ids (B, Lc), claim_mask, evidence_ids
(B, K, Le), evidence_mask) -> logits (B, 3)``. Metrics (fractions in [0, 1]): ``{val,test}/acc`` (label accuracy:
Table 9's "All" with retrieved evidence, its "gold" column with ``evidence_mode="gold"``: the run record's
``data.evidence`` tells them apart) and, with retrieved evidence, ``{val,test}/fever_score`` (the official FEVER
score, "Sub": label right and a whole gold evidence set among the first 5 sentences given to the model; each
example counted once under DDP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from coda_exp.metrics import IndexedAccuracy
from coda_exp.metrics.fever import MAX_EVIDENCE, IndexedFeverScore, evidence_complete
from coda_exp.tasks.base import TaskModule
from coda_exp.tasks.classification import class_predictions

STAGE_SPLITS = {"val": "validation", "test": "test"}


class EvidenceClassificationTask(TaskModule):
    """``claims(split)``: one row per example of ``split`` in index order (``id``, ``label`` name, gold
    ``evidence`` sets, ``predicted_evidence`` = the ``[page, sentence]`` pairs the model reads,
    ``num_gold_evidence``); None (e.g. a test with a stand-in data module) disables the FEVER score and leaves the
    prediction rows with ids and label ids only.

    Test prediction rows: ``index``, ``id`` (the FEVER claim id), ``label`` and ``prediction`` (label names:
    SUPPORTS, REFUTES, NOT ENOUGH INFO), ``predicted_evidence`` (at most 5 ``[page, sentence]`` pairs: those the
    official scorer reads), ``evidence`` (the gold sets, so the FEVER score can be recomputed from the file),
    ``num_gold_evidence`` (sentences in the smallest gold set, null for NEI: Figure 8) and ``evidence_mode``.
    """
    FAMILY = "evidence_classification"

    @classmethod
    def validation_metrics(cls, options: dict) -> set[str]:
        return {"loss", "acc", "fever_score"}  # fever_score with retrieved evidence (the data's evidence_mode)

    def __init__(self, model, optimizer, num_classes: int, label_names: Sequence[str], evidence_mode: str,
                 claims: Callable[[str], list[dict]] | None, **kwargs):
        super().__init__(model, optimizer, **kwargs)
        self.num_classes, self.evidence_mode, self.claims = num_classes, evidence_mode, claims
        self.label_names = list(label_names)
        self.scores_fever = evidence_mode == "retrieved" and claims is not None
        self.val_acc, self.test_acc = IndexedAccuracy(), IndexedAccuracy()
        self.val_fever, self.test_fever = IndexedFeverScore(), IndexedFeverScore()
        self._complete: dict[str, torch.Tensor] = {}
        self.add_means("val/loss", "test/loss")

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["claim_ids"], batch["claim_mask"], batch["evidence_ids"],
                          batch["evidence_mask"])  # (B, num_classes)

    def train_loss(self, batch):
        return F.cross_entropy(self(batch), batch["label"]), batch["label"].numel()

    def complete(self, split: str) -> torch.Tensor:
        """Per example of ``split``: whether its evidence is complete in the official scorer's sense."""
        if split not in self._complete:
            self._complete[split] = torch.tensor(
                [evidence_complete(r["label"], r["evidence"], r["predicted_evidence"], MAX_EVIDENCE)
                 for r in self.claims(split)], dtype=torch.bool)
        return self._complete[split]

    def _eval_step(self, batch, stage: str) -> torch.Tensor:
        logits = self(batch)
        preds, label, index, n = logits.argmax(-1), batch["label"], batch["index"], batch["label"].numel()
        acc, fever = (self.val_acc, self.val_fever) if stage == "val" else (self.test_acc, self.test_fever)
        acc.update(preds, label, index)
        self.log_mean(f"{stage}/loss", F.cross_entropy(logits, label, reduction="none"), 1.0, index)  # DDP-exact
        self.log(f"{stage}/acc", acc, on_epoch=True, prog_bar=True, batch_size=n)
        if self.scores_fever:
            fever.update(preds, label, index, self.complete(STAGE_SPLITS[stage]).to(index.device)[index])
            self.log(f"{stage}/fever_score", fever, on_epoch=True, prog_bar=True, batch_size=n)
        return preds

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        preds = self._eval_step(batch, "test")
        self.buffer_predictions(index=batch["index"], label=batch["label"], prediction=preds)

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        rows = self.claims("test") if self.claims is not None else None
        for row in self.test_predictions:
            row["label"], row["prediction"] = self.label_names[row["label"]], self.label_names[row["prediction"]]
            row["evidence_mode"] = self.evidence_mode
            if rows is not None:
                claim = rows[row["index"]]
                row.update(id=claim["id"], predicted_evidence=claim["predicted_evidence"][:MAX_EVIDENCE],
                           evidence=claim["evidence"], num_gold_evidence=claim["num_gold_evidence"])

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> list[dict]:
        """``index``, ``prediction`` (the class id) and ``probabilities`` per claim."""
        return class_predictions(self(batch), batch["index"])
