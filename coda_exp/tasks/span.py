"""Span extraction over retrieved passages (CoDA Table 1: Quasar-T, SearchQA with DecaProp): start/end
cross-entropy, best-span decoding, SQuAD EM/F1.

The network reads a passage and a question: ``model(p_ids (B, Lp), p_mask, q_ids (B, Lq), q_mask, p_chars=...,
q_chars=..., p_em=..., q_em=...) -> (start logits (B, Lp), end logits (B, Lp))``, masked positions already very
negative. Loss: the mean of the cross-entropies of start and end. Decoding: the ``(i, j)`` maximising
``log p_start(i) + log p_end(j)`` with ``0 <= j - i < max_span`` over unmasked positions, for the whole batch at once
(:func:`best_spans`). ``{val,test}/loss`` is the mean over the examples whose context holds a gold span (the
others have no target). Metrics (fractions in [0, 1], each example once under DDP): ``{val,test}/em``,
``{val,test}/f1`` (SQuAD normalisation, max over the gold answers: :mod:`coda_exp.metrics.squad`) and, with
``ngram_metrics`` (SearchQA), ``{val,test}/em_unigram`` and ``{val,test}/f1_ngram``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from coda_exp.metrics.squad import IndexedSpanScores, best_over_golds, is_unigram
from coda_exp.tasks.base import TaskModule

STAGE_SPLITS = {"val": "validation", "test": "test"}
NEG = -1e30


def best_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor, max_span: int = 16
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(start (B,), end (B,), score (B,))``: the span ``i <= j < i + max_span`` of unmasked positions with the
    largest ``log_softmax(start)[i] + log_softmax(end)[j]`` (softmaxes over unmasked positions). Batched: the
    scores of the ``max_span`` diagonals are built as one (B, L, max_span) tensor (no (B, L, L) matrix, no loop
    over examples). A row with no unmasked position gives (0, 0) and score -inf."""
    if max_span < 1:
        raise ValueError(f"max_span must be >= 1, got {max_span}")
    length = start_logits.size(1)
    ls = F.log_softmax(start_logits.float().masked_fill(~mask, NEG), -1).masked_fill(~mask, float("-inf"))
    le = F.log_softmax(end_logits.float().masked_fill(~mask, NEG), -1).masked_fill(~mask, float("-inf"))
    k = min(max_span, length)
    le_band = F.pad(le, (0, k - 1), value=float("-inf")).unfold(1, k, 1)  # (B, L, k): le[b, i + d]
    scores = ls.unsqueeze(-1) + le_band  # (B, L, k): span (i, i + d)
    best, flat = scores.flatten(1).max(-1)
    start = torch.div(flat, k, rounding_mode="floor")
    return start, start + flat % k, best


class SpanExtractionTask(TaskModule):
    """``answers(split)``: the gold answer strings of each example of ``split`` (by ``index``); ``tokens(split)``:
    its context tokens, each with its trailing whitespace (the predicted text is ``"".join(tokens[i: j + 1])``).
    ``max_span``: the longest span decoded (DecaProp: 16 tokens, j - i <= 15).

    Test prediction rows: ``index``, ``start``, ``end``, ``prediction`` (text), ``answers``, ``em``, ``f1``.
    """
    FAMILY = "span_extraction"

    @classmethod
    def validation_metrics(cls, options: dict) -> set[str]:
        return {"loss", "em", "f1", "em_unigram", "f1_ngram"}  # the last two where the data has ngram_metrics

    def __init__(self, model, optimizer, answers: Callable[[str], list[list[str]]],
                 tokens: Callable[[str], list[list[str]]], ngram_metrics: bool, max_span: int = 16, **kwargs):
        super().__init__(model, optimizer, **kwargs)
        self.answers, self.tokens, self.ngram_metrics, self.max_span = answers, tokens, ngram_metrics, max_span
        self.val_scores, self.test_scores = IndexedSpanScores(), IndexedSpanScores()
        self.add_means("val/loss", "test/loss")

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model(batch["p_ids"], batch["p_mask"], batch["q_ids"], batch["q_mask"],
                          p_chars=batch.get("p_chars"), q_chars=batch.get("q_chars"), p_em=batch.get("p_em"),
                          q_em=batch.get("q_em"))  # (B, Lp) each

    @staticmethod
    def loss(start_logits, end_logits, start, end) -> torch.Tensor:
        """Mean of the start and end cross-entropies over the examples with a gold span (target -1: none)."""
        return (F.cross_entropy(start_logits.float(), start, ignore_index=-1)
                + F.cross_entropy(end_logits.float(), end, ignore_index=-1)) / 2

    @staticmethod
    def example_losses(start_logits, end_logits, start, end) -> torch.Tensor:
        """Per example: the mean of its start and end cross-entropies (0 for one without a gold span, target -1)."""
        return (F.cross_entropy(start_logits.float(), start, ignore_index=-1, reduction="none")
                + F.cross_entropy(end_logits.float(), end, ignore_index=-1, reduction="none")) / 2

    def train_loss(self, batch):
        return self.loss(*self(batch), batch["start"], batch["end"]), batch["start"].numel()

    def texts(self, split: str, index: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> list[str]:
        """The context text of each predicted span (empty for an empty context)."""
        tokens = self.tokens(split)
        return ["".join(tokens[n][i: j + 1]).strip()
                for n, i, j in zip(index.tolist(), start.tolist(), end.tolist())]

    def _eval_step(self, batch, stage: str):
        start_logits, end_logits = self(batch)
        split = STAGE_SPLITS[stage]
        # the loss is the mean over the examples with a gold span (weight 1; the others 0), each once under DDP
        losses = self.example_losses(start_logits, end_logits, batch["start"], batch["end"])
        answerable = (batch["start"] >= 0).to(losses.dtype)
        self.log_mean(f"{stage}/loss", losses * answerable, answerable, batch["index"])
        start, end, _ = best_spans(start_logits, end_logits, batch["p_mask"], self.max_span)
        texts = self.texts(split, batch["index"], start, end)
        answers = self.answers(split)
        golds = [answers[i] for i in batch["index"].tolist()]
        scored = [best_over_golds(t, g) for t, g in zip(texts, golds)]
        device = batch["index"].device
        em = torch.tensor([s[0] for s in scored], dtype=torch.float64, device=device)  # exact in the saved rows
        f1 = torch.tensor([s[1] for s in scored], dtype=torch.float64, device=device)
        unigram = torch.tensor([is_unigram(g) for g in golds], dtype=torch.bool, device=device)
        (self.val_scores if stage == "val" else self.test_scores).update(em, f1, unigram, batch["index"])
        return start, end, em, f1

    def _log_scores(self, stage: str) -> None:
        metric = self.val_scores if stage == "val" else self.test_scores
        scores = metric.compute()
        names = ("em", "f1", "em_unigram", "f1_ngram") if self.ngram_metrics else ("em", "f1")
        for name in names:
            self.log(f"{stage}/{name}", scores[name], prog_bar=name in ("em", "f1"))
        metric.reset()

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_scores("val")

    def test_step(self, batch, batch_idx):
        start, end, em, f1 = self._eval_step(batch, "test")
        self.buffer_predictions(index=batch["index"], start=start, end=end, em=em, f1=f1)

    def on_test_epoch_end(self) -> None:
        self._log_scores("test")
        super().on_test_epoch_end()
        answers, tokens = self.answers("test"), self.tokens("test")
        for row in self.test_predictions:
            row["prediction"] = "".join(tokens[row["index"]][row["start"]: row["end"] + 1]).strip()
            row["answers"] = answers[row["index"]]

    def predict_step(self, batch, batch_idx, dataloader_idx: int = 0) -> list[dict]:
        """``index``, ``start``, ``end`` (inclusive context token indices of the best span) and its ``score``."""
        start, end, score = best_spans(*self(batch), batch["p_mask"], self.max_span)
        return [{"index": n, "start": i, "end": j, "score": x} for n, i, j, x in
                zip(batch["index"].tolist(), start.tolist(), end.tolist(), score.tolist())]
