"""The span task: batched best-span decoding (hand-built scores, max_span, masks, a brute-force check), the loss,
and training/evaluation with a stand-in network on the Quasar-T and SearchQA fixtures (metrics, saved
predictions), and Table 1 filled from synthetic records."""

from __future__ import annotations

import functools
import itertools

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from coda_exp.data.span import SpanDataModule
from coda_exp.metrics.squad import best_over_golds
from coda_exp.tasks import SpanExtractionTask
from coda_exp.tasks.span import best_spans
from tests import FIXTURES

pytestmark = pytest.mark.usefixtures("one_thread")


def logits(values):
    return torch.tensor(values, dtype=torch.float).log()  # log-probabilities: the scores multiply


def test_best_span_of_a_hand_built_score_matrix():
    # p_start = [.1 .5 .1 .3], p_end = [.1 .1 .2 .6]: the best (i <= j) is (1, 3) with .5 * .6 = .30
    s, e = logits([[0.1, 0.5, 0.1, 0.3]]), logits([[0.1, 0.1, 0.2, 0.6]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    start, end, score = best_spans(s, e, mask, max_span=15)
    assert (start.item(), end.item()) == (1, 3) and score.exp().item() == pytest.approx(0.30)
    # max_span 2 (j - i < 2): (1, 3) is too long; the best is (3, 3) with .3 * .6 = .18 (over (1, 2) = .10)
    start, end, score = best_spans(s, e, mask, max_span=2)
    assert (start.item(), end.item()) == (3, 3) and score.exp().item() == pytest.approx(0.18)
    # the end never precedes the start: p_end peaks before p_start
    start, end, _ = best_spans(logits([[0.1, 0.1, 0.8]]), logits([[0.8, 0.1, 0.1]]), torch.ones(1, 3, dtype=torch.bool))
    assert start.item() <= end.item()


def test_masked_positions_are_never_chosen_and_softmax_ignores_them():
    s = torch.tensor([[0.0, 1.0, 9.0, 9.0], [5.0, 0.0, 0.0, 0.0]])
    e = torch.tensor([[0.0, 2.0, 9.0, 9.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False, False], [False, True, True, True]])
    start, end, score = best_spans(s, e, mask)
    assert start.tolist() == [1, 1] and end[0].item() == 1 and mask[1, end[1]]
    # example 0: softmax over the two unmasked positions only
    assert score[0].item() == pytest.approx((torch.log_softmax(torch.tensor([0.0, 1.0]), 0)[1]
                                             + torch.log_softmax(torch.tensor([0.0, 2.0]), 0)[1]).item())
    start, end, score = best_spans(s[:1], e[:1], torch.zeros(1, 4, dtype=torch.bool))  # an empty context
    assert (start.item(), end.item()) == (0, 0) and score.item() == float("-inf")


def test_batched_decoding_equals_a_brute_force_search():
    gen = torch.Generator().manual_seed(0)
    s, e = torch.randn(6, 30, generator=gen), torch.randn(6, 30, generator=gen)
    lengths = torch.tensor([30, 1, 5, 17, 29, 12])
    mask = torch.arange(30)[None] < lengths[:, None]
    for max_span in (1, 3, 15, 40):
        start, end, score = best_spans(s, e, mask, max_span)
        for b, n in enumerate(lengths.tolist()):
            ls, le = torch.log_softmax(s[b, :n], 0), torch.log_softmax(e[b, :n], 0)
            best = max((ls[i] + le[j], i, j) for i, j in itertools.product(range(n), repeat=2) if 0 <= j - i < max_span)
            assert (start[b].item(), end[b].item()) == best[1:] and score[b].item() == pytest.approx(best[0].item())


def test_loss_is_the_mean_of_start_and_end_cross_entropy_and_skips_missing_spans():
    s, e = torch.randn(3, 5), torch.randn(3, 5)
    start, end = torch.tensor([1, -1, 4]), torch.tensor([2, -1, 4])
    ce = torch.nn.functional.cross_entropy
    want = (ce(s[[0, 2]], start[[0, 2]]) + ce(e[[0, 2]], end[[0, 2]])) / 2
    assert SpanExtractionTask.loss(s, e, start, end).item() == pytest.approx(want.item())


def test_evaluation_loss_is_the_mean_over_answerable_examples(monkeypatch):
    """Example losses 5.0 (1 of 10 examples answerable) and 1.0 (10 of 10), and a batch with none: the epoch's
    val/loss is (5 + 10 * 1) / 11, not the mean weighted by whole batches (3.0)."""
    def batch(answerable: int, first: int) -> dict:
        start = torch.tensor([1] * answerable + [-1] * (10 - answerable))
        return {"p_ids": torch.ones(10, 4, dtype=torch.long), "p_mask": torch.ones(10, 4, dtype=torch.bool),
                "q_ids": torch.ones(10, 2, dtype=torch.long), "q_mask": torch.ones(10, 2, dtype=torch.bool),
                "start": start, "end": start.clone(), "index": torch.arange(first, first + 10)}

    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def forward(self, p_ids, p_mask, *args, **kwargs):
            return (p_ids.float() * self.w,) * 2

    losses = iter([5.0, 1.0, 7.0])  # the batch with none: its 7.0 weighs nothing
    monkeypatch.setattr(SpanExtractionTask, "example_losses", staticmethod(lambda *args: torch.full((10,), next(losses))))
    task = SpanExtractionTask(Fixed(), functools.partial(torch.optim.Adam, lr=0.05), ngram_metrics=False,
                              answers=lambda split: [["a"]] * 30, tokens=lambda split: [["a ", "b "]] * 30)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    loader = torch.utils.data.DataLoader([batch(1, 0), batch(10, 10), batch(0, 20)], batch_size=None)
    (metrics,) = trainer.validate(task, loader, verbose=False)
    assert metrics["val/loss"] == pytest.approx((5.0 + 10 * 1.0) / 11)


class StandIn(nn.Module):
    """A linear scorer of each passage word and its question-match feature (the DecaProp model's interface)."""

    def __init__(self, vocab_size: int, embeddings=None, pad_id: int = 0, char_vocab_size=None, dim: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.out = nn.Linear(dim + 1, 2)

    def forward(self, p_ids, p_mask, q_ids, q_mask, p_chars=None, q_chars=None, p_em=None, q_em=None):
        x = torch.cat([self.emb(p_ids), (p_em if p_em is not None else torch.zeros_like(p_mask).float())[..., None]], -1)
        start, end = self.out(x).masked_fill(~p_mask[..., None], -1e30).unbind(-1)  # (B, Lp) each
        return start, end


def trained(tmp_path, name, epochs=1, **trainer_kw):
    dm = SpanDataModule(name, dir=str(FIXTURES / name), cache_dir=str(tmp_path / "cache"), batch_size=4,
                        eval_batch_size=3, use_exact_match=True)
    dm.setup()
    task = SpanExtractionTask(StandIn(**dm.model_kwargs()), functools.partial(torch.optim.Adam, lr=0.05),
                              **dm.task_kwargs())
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", **trainer_kw)
    trainer.fit(task, datamodule=dm)
    return dm, task, trainer, trainer.test(task, datamodule=dm, verbose=False)[0]


def test_fast_dev_run_trains_validates_and_tests(tmp_path):
    _, _, trainer, metrics = trained(tmp_path, "quasart", fast_dev_run=True)
    assert trainer.global_step == 1 and {"test/em", "test/f1"} <= set(metrics)
    assert "test/em_unigram" not in metrics  # Quasar-T reports overall EM/F1 only


def test_training_learns_the_fixture_and_predictions_recompute_the_metrics(tmp_path):
    dm, task, _, metrics = trained(tmp_path, "searchqa", epochs=20, num_sanity_val_steps=0)
    assert {"test/em", "test/f1", "test/em_unigram", "test/f1_ngram"} <= set(metrics)
    assert 0.0 <= metrics["test/em"] <= metrics["test/f1"] <= 1.0
    # 6 of 8 test questions have their answer in the context: a learned "the word after 'the'" rule finds them
    assert metrics["test/f1"] >= 0.5, metrics
    rows = task.test_predictions
    assert [r["index"] for r in rows] == list(range(8))
    assert set(rows[0]) >= {"index", "prediction", "answers", "em", "f1", "start", "end"}
    for row in rows:
        assert (row["em"], row["f1"]) == pytest.approx(best_over_golds(row["prediction"], row["answers"]))
        assert row["answers"] == dm.answers("test")[row["index"]]
    assert sum(r["f1"] for r in rows) / 8 == pytest.approx(metrics["test/f1"], abs=1e-6)
    assert sum(r["em"] for r in rows) / 8 == pytest.approx(metrics["test/em"], abs=1e-6)
    empty = next(r for r in rows if not dm.tokens("test")[r["index"]])
    assert empty["prediction"] == "" and empty["f1"] == 0.0
