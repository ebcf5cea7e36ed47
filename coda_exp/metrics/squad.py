"""SQuAD exact match and F1 (Rajpurkar et al. 2016, the official v1.1 evaluation script's logic), the maximum over
the gold answers, as fractions in [0, 1] (tables multiply by 100), and a DDP-safe accumulator.

Normalisation (``normalize_answer``): lower case, punctuation removed, the articles a/an/the removed, whitespace
collapsed. F1 is the bag-of-tokens F1 of the normalised texts (Quasar-T's own ``metric.py`` uses set-based F1: not
this); when one side normalises to nothing, F1 = EM (the v2.0 script's rule, torchmetrics' too: v1.1 gave 0 to an
empty prediction of an answer that normalises to nothing, e.g. "The", though its EM was 1). Checked against
torchmetrics' ``squad`` on random cases (``tests/metrics/test_squad.py``). SearchQA (Dunn et al. 2017) also reports EM over the questions whose answer is one word (``em_unigram``) and
F1 over those whose answer has several (``f1_ngram``); the answer's length is counted after normalisation.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import torch
from torchmetrics import Metric

from coda_exp.metrics.states import cat_state, first_occurrence

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """The official script's ``normalize_answer``: lower, drop punctuation, drop articles, collapse whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:  # the v2.0 script's (and torchmetrics') rule; v1.1 gave 0 even when both are empty
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_over_golds(prediction: str, golds: Sequence[str]) -> tuple[float, float]:
    """``(EM, F1)`` of ``prediction``, each the maximum over ``golds`` (0 when there is no gold answer)."""
    if not golds:
        return 0.0, 0.0
    return max(exact_match(prediction, g) for g in golds), max(f1(prediction, g) for g in golds)


def is_unigram(golds: Sequence[str]) -> bool:
    """Whether the (first) gold answer is one word after normalisation (SearchQA's unigram / n-gram split)."""
    return bool(golds) and len(normalize_answer(golds[0]).split()) == 1


class IndexedSpanScores(Metric):
    """Mean EM and F1 over examples, each example id counted once (DDP pads shards with repeats).

    ``update(em (B,), f1 (B,), unigram (B,) bool, index (B,))``; ``compute()`` -> ``{"em", "f1", "em_unigram",
    "f1_ngram"}`` (the last two over the unigram-answer / n-gram-answer examples; 0 when there are none).
    """

    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for name in ("em", "f1", "unigram", "index"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, em: torch.Tensor, f1: torch.Tensor, unigram: torch.Tensor, index: torch.Tensor) -> None:
        if not em.shape == f1.shape == unigram.shape == index.shape:
            raise ValueError("em, f1, unigram and index must have one shape, got "
                             f"{[tuple(t.shape) for t in (em, f1, unigram, index)]}")
        self.em.append(em.detach().float())
        self.f1.append(f1.detach().float())
        self.unigram.append(unigram.detach().bool())
        self.index.append(index.detach().long())

    def compute(self) -> dict[str, torch.Tensor]:
        if isinstance(self.em, list) and not self.em:
            zero = torch.tensor(0.0)
            return {"em": zero, "f1": zero, "em_unigram": zero, "f1_ngram": zero}
        keep = first_occurrence(cat_state(self.index))
        em, f1_, uni = cat_state(self.em)[keep], cat_state(self.f1)[keep], cat_state(self.unigram)[keep]

        def mean(x: torch.Tensor) -> torch.Tensor:
            return x.mean() if x.numel() else torch.tensor(0.0, device=x.device)

        return {"em": mean(em), "f1": mean(f1_), "em_unigram": mean(em[uni]), "f1_ngram": mean(f1_[~uni])}
