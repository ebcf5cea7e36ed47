"""Corpus BLEU (Papineni et al. 2002) two ways: sacreBLEU on detokenized text, and ``multi-bleu.perl`` on tokens.

The CoDA paper's IWSLT'15 En→Vi numbers (Table 4: Transformer 28.43, CoDA 29.84; Tables 8-9) are *tokenized*
BLEU: computed by Tensor2Tensor / ``multi-bleu.perl`` on the Stanford release, whose references are already
Moses-tokenized (with ``&apos;``-style escapes). :func:`tokenized_bleu` computes exactly that: the hypotheses
and references are split on whitespace and nothing else (no further tokenization, case-sensitive unless
``lowercase``), clipped n-gram precisions for n = 1..4, geometric mean without smoothing (any zero precision
gives 0), brevity penalty ``exp(1 - r/c)`` when the hypothesis corpus is shorter, as ``multi-bleu.perl`` does.
:func:`sacrebleu_score` is the modern, comparable-across-papers number (sacreBLEU defaults: 13a tokenization,
exp smoothing) on detokenized text; report it beside the tokenized score with its signature.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

_ASCII_WS = re.compile(r"[ \t\n\r\f\v]+")  # Perl's split ' ' on bytes: ASCII whitespace only


class BleuStats(NamedTuple):
    score: float  # 0-100
    precisions: tuple[float, ...]  # clipped n-gram precisions, 0-100
    brevity_penalty: float
    ratio: float  # hypothesis length / reference length
    hyp_len: int
    ref_len: int


def _words(text: str, lowercase: bool) -> list[str]:
    text = text.lower() if lowercase else text
    return [w for w in _ASCII_WS.split(text) if w]


def _ngrams(words: list[str], n: int) -> Counter:
    return Counter(tuple(words[i: i + n]) for i in range(len(words) - n + 1))


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise TypeError("hyps and refs are sequences of sentences, not single strings")
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references; they must be aligned one to one")


def multi_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False, max_order: int = 4) -> BleuStats:
    """``multi-bleu.perl`` (one reference per sentence) with its intermediate numbers."""
    _check(hyps, refs)
    correct, total = [0] * max_order, [0] * max_order
    hyp_len = ref_len = 0
    for hyp, ref in zip(hyps, refs):
        h, r = _words(hyp, lowercase), _words(ref, lowercase)
        hyp_len += len(h)
        ref_len += len(r)
        for n in range(1, max_order + 1):
            hc, rc = _ngrams(h, n), _ngrams(r, n)
            total[n - 1] += sum(hc.values())
            correct[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
    precisions = tuple(100.0 * c / t if t else 0.0 for c, t in zip(correct, total))
    if ref_len == 0:
        return BleuStats(0.0, precisions, 0.0, 0.0, hyp_len, ref_len)
    if hyp_len == 0:
        return BleuStats(0.0, precisions, 0.0, 0.0, hyp_len, ref_len)
    bp = 1.0 if hyp_len >= ref_len else math.exp(1.0 - ref_len / hyp_len)
    if any(c == 0 for c in correct):
        score = 0.0
    else:
        score = 100.0 * bp * math.exp(sum(math.log(c / t) for c, t in zip(correct, total)) / max_order)
    return BleuStats(score, precisions, bp, hyp_len / ref_len, hyp_len, ref_len)


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False) -> float:
    """Corpus BLEU (0-100) on already-tokenized text, as ``multi-bleu.perl`` (the paper's Table 4 metric)."""
    return multi_bleu(hyps, refs, lowercase=lowercase).score


def sacrebleu_score(hyps: Sequence[str], refs: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU corpus score (0-100, default settings) on detokenized text, and its signature string."""
    from sacrebleu.metrics import BLEU

    _check(hyps, refs)
    bleu = BLEU()
    score = bleu.corpus_score(list(hyps), [list(refs)]).score
    return score, str(bleu.get_signature())
