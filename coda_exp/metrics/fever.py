"""The FEVER score (Thorne et al. 2018): our implementation of the official scorer's logic.

The PyPI package ``fever-scorer`` (2.0.39, module ``fever.scorer``) cannot be installed: its ``setup.py`` passes
Python's builtin ``license`` object as the package licence, which every setuptools we tried rejects while writing
the metadata (``'_Printer' object has no attribute 'splitlines'``). This module follows its logic
(github ``sheffieldnlp/fever-scorer``, ``src/fever/scorer.py``, the version with ``max_evidence``):

- a claim is *strictly correct* when its label is right and either its gold label is NOT ENOUGH INFO or one whole
  gold evidence set (every ``[page, sentence]`` of it) is among the first ``max_evidence`` predicted sentences;
- the FEVER score is the number of strictly correct claims over all claims; label accuracy over all claims;
- evidence precision and recall are macro averages over the verifiable (not NEI) claims: precision = predicted
  sentences (first ``max_evidence``) that belong to any gold set / predicted sentences (1 with none predicted);
  recall = 1 when a whole gold set is among them (or the claim has no gold evidence), else 0.

Labels are compared case-insensitively, as the official scorer does. ``tests/metrics/test_fever.py`` checks it on
hand-built cases, among them the official scorer's own ``max_evidence`` tests, and
``tests/metrics/test_fever_official.py`` (slow: it fetches the pinned sdist from PyPI and imports its
``scorer.py`` from the archive) against the official ``fever_score`` on 1500 random instances: all five numbers
equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from coda_exp.metrics.accuracy import IndexedAccuracy

NEI = "NOT ENOUGH INFO"
MAX_EVIDENCE = 5  # the official scorer's default: only the first 5 predicted sentences count


def _pairs(predicted: Iterable, max_evidence: int | None) -> list[tuple[str, int]]:
    pairs = [(str(p), int(s)) for p, s in predicted]
    return pairs if max_evidence is None else pairs[:max_evidence]


def gold_sets(evidence: Sequence[Sequence[Sequence]]) -> list[list[tuple[str, int]]]:
    """The ``[page, sentence]`` pairs of each official evidence set ``[[annotation_id, evidence_id, page,
    sentence_id], ...]`` (NEI's ``[[ann, None, None, None]]`` keeps its None pair)."""
    return [[(e[2], e[3]) for e in group] for group in evidence]


def evidence_complete(label: str, evidence: Sequence, predicted: Iterable, max_evidence: int | None = MAX_EVIDENCE
                      ) -> bool:
    """Whether a right label would be strictly correct: the gold label is NEI, or one whole gold set is among the
    first ``max_evidence`` predicted ``[page, sentence]`` pairs."""
    if label.upper() == NEI:
        return True
    pred = set(_pairs(predicted, max_evidence))
    return any(all(pair in pred for pair in group) for group in gold_sets(evidence))


def evidence_precision(label: str, evidence: Sequence, predicted: Iterable, max_evidence: int | None = MAX_EVIDENCE
                       ) -> tuple[float, int]:
    """(precision, 1) for a verifiable claim, (0, 0) for NEI (not counted)."""
    if label.upper() == NEI:
        return 0.0, 0
    gold = {pair for group in gold_sets(evidence) for pair in group if pair[1] is not None}
    pred = _pairs(predicted, max_evidence)
    if not pred:
        return 1.0, 1
    return sum(p in gold for p in pred) / len(pred), 1


def evidence_recall(label: str, evidence: Sequence, predicted: Iterable, max_evidence: int | None = MAX_EVIDENCE
                    ) -> tuple[float, int]:
    """(1 or 0, 1) for a verifiable claim (a whole gold set retrieved, or no gold evidence at all), (0, 0) for NEI."""
    if label.upper() == NEI:
        return 0.0, 0
    if not evidence or all(len(group) == 0 for group in evidence):
        return 1.0, 1
    return float(evidence_complete(label, evidence, predicted, max_evidence)), 1


def fever_score(instances: Sequence[dict], max_evidence: int | None = MAX_EVIDENCE
                ) -> tuple[float, float, float, float, float]:
    """(strict score, label accuracy, evidence precision, evidence recall, F1) of official-format instances
    ``{"label", "predicted_label", "evidence", "predicted_evidence"}`` (the official scorer's return value)."""
    if not instances:
        raise ValueError("fever_score needs at least one instance")
    correct = strict = 0
    prec = prec_n = rec = rec_n = 0.0
    for inst in instances:
        for key in ("label", "predicted_label", "evidence", "predicted_evidence"):
            if key not in inst:
                raise ValueError(f"instance {inst.get('id', '?')} lacks {key!r}")
        label, args = inst["label"], (inst["evidence"], inst["predicted_evidence"], max_evidence)
        if label.upper() == inst["predicted_label"].upper():
            correct += 1
            strict += evidence_complete(label, *args)
        p, n = evidence_precision(label, *args)
        prec, prec_n = prec + p, prec_n + n
        r, n = evidence_recall(label, *args)
        rec, rec_n = rec + r, rec_n + n
    precision = prec / prec_n if prec_n else 1.0
    recall = rec / rec_n if rec_n else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    total = len(instances)
    return strict / total, correct / total, precision, recall, f1


def scorer_instances(rows: Iterable[dict]) -> list[dict]:
    """Official scorer instances from our saved test predictions (``label``/``prediction`` label names,
    ``evidence`` gold sets, ``predicted_evidence``)."""
    return [{"label": r["label"], "predicted_label": r["prediction"], "evidence": r["evidence"],
             "predicted_evidence": r["predicted_evidence"]} for r in rows]


class IndexedFeverScore(IndexedAccuracy):
    """The FEVER score as a DDP-safe metric: each example id counted once (:class:`IndexedAccuracy`).

    ``update(preds, target, index, complete)``: ``complete`` (bool per example) says whether the example's
    evidence is complete in the official sense (:func:`evidence_complete`); an example counts when its label is
    right and ``complete`` holds."""

    def update(self, preds: torch.Tensor, target: torch.Tensor, index: torch.Tensor,
               complete: torch.Tensor | None = None) -> None:
        if complete is None or complete.shape != preds.shape:
            raise ValueError("IndexedFeverScore.update needs `complete`, one bool per prediction")
        super().update(torch.where(complete.bool(), preds, torch.full_like(preds, -1)), target, index)
