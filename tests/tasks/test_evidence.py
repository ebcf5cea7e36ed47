"""The evidence task with a stand-in network on the FEVER fixture: training, metrics, saved predictions, Figure 8."""

from __future__ import annotations

import functools
from collections import defaultdict

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from coda_exp.data.evidence import EvidenceDataModule
from coda_exp.metrics.fever import fever_score, scorer_instances
from coda_exp.tasks import EvidenceClassificationTask
from tests import FIXTURES

pytestmark = pytest.mark.usefixtures("one_thread")


class StandIn(nn.Module):
    """Bag of words of the claim and of the max-pooled evidence sentences (the AttConv model's interface)."""

    def __init__(self, vocab_size: int, num_classes: int, embeddings=None, pad_id: int = 0, dim: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.out = nn.Linear(2 * dim, num_classes)

    def forward(self, claim_ids, claim_mask, evidence_ids, evidence_mask):
        claim = (self.emb(claim_ids) * claim_mask[..., None]).sum(1)  # (B, d)
        sent = (self.emb(evidence_ids) * evidence_mask[..., None]).sum(2)  # (B, K, d)
        sent = sent.masked_fill(~evidence_mask.any(-1)[..., None], -1e4).max(1).values  # (B, d)
        return self.out(torch.cat([claim, sent], -1))


def trained(tmp_path, evidence: str, epochs: int = 1, **trainer_kw):
    dm = EvidenceDataModule(dir=str(FIXTURES / "fever"), cache_dir=str(tmp_path / "cache"), evidence=evidence,
                            retrieval={"hash_bits": 16}, progress=False, batch_size=8)
    dm.setup()
    task = EvidenceClassificationTask(StandIn(**dm.model_kwargs()), functools.partial(torch.optim.Adagrad, lr=0.1),
                                      **dm.task_kwargs())
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", **trainer_kw)
    trainer.fit(task, datamodule=dm)
    return dm, task, trainer, trainer.test(task, datamodule=dm, verbose=False)[0]


def test_fast_dev_run_trains_and_validates(tmp_path):
    _, _task, trainer, metrics = trained(tmp_path, "retrieved", fast_dev_run=True)
    assert trainer.global_step == 1 and {"test/acc", "test/fever_score"} <= set(metrics)


def test_retrieved_mode_logs_acc_and_the_fever_score_recomputable_from_predictions(tmp_path):
    dm, task, _, metrics = trained(tmp_path, "retrieved", epochs=3)
    rows = task.test_predictions
    assert len(rows) == 12 and [r["index"] for r in rows] == list(range(12))
    assert {"index", "id", "label", "prediction", "predicted_evidence", "evidence", "num_gold_evidence"} <= set(rows[0])
    assert rows[0]["id"] == dm.claim_rows("test")[0]["id"] and rows[0]["label"] in dm.reader.label_names
    assert all(len(r["predicted_evidence"]) <= 5 for r in rows)
    strict, acc, *_ = fever_score(scorer_instances(rows))
    assert metrics["test/acc"] == pytest.approx(acc) and metrics["test/fever_score"] == pytest.approx(strict)
    assert metrics["test/fever_score"] <= metrics["test/acc"]
    # Figure 8: accuracy by the number of gold evidence sentences, from the saved rows alone
    groups = defaultdict(list)
    for r in rows:
        if r["num_gold_evidence"] is not None:
            groups[r["num_gold_evidence"]].append(r["label"] == r["prediction"])
    assert set(groups) == {1} and sum(map(len, groups.values())) == 8


def test_gold_mode_logs_accuracy_only(tmp_path):
    dm, task, _, metrics = trained(tmp_path, "gold")
    assert "test/acc" in metrics and "test/fever_score" not in metrics
    assert dm.stats["evidence"] == "gold" and task.test_predictions[0]["evidence_mode"] == "gold"


def test_the_task_reads_the_four_tensors_of_a_batch():
    seen = {}

    class Probe(nn.Module):
        def forward(self, *args):
            seen["shapes"] = [tuple(a.shape) for a in args]
            return torch.zeros(args[0].shape[0], 3, requires_grad=True)

    task = EvidenceClassificationTask(Probe(), torch.optim.SGD, num_classes=3, label_names=["a", "b", "c"],
                                      evidence_mode="gold", claims=None)
    batch = {"claim_ids": torch.ones(2, 4, dtype=torch.long), "claim_mask": torch.ones(2, 4, dtype=torch.bool),
             "evidence_ids": torch.ones(2, 3, 5, dtype=torch.long),
             "evidence_mask": torch.ones(2, 3, 5, dtype=torch.bool), "label": torch.tensor([0, 2])}
    assert task(batch).shape == (2, 3) and seen["shapes"] == [(2, 4), (2, 4), (2, 3, 5), (2, 3, 5)]
