"""Corpus BLEU (Papineni et al. 2002) two ways, both with sacreBLEU: on tokens as ``multi-bleu.perl``, and on
detokenized text with sacreBLEU's own tokenization.

The CoDA paper's IWSLT'15 En→Vi numbers (Table 4: Transformer 28.43, CoDA 29.84; Tables 8-9) are *tokenized*
BLEU: computed by Tensor2Tensor / ``multi-bleu.perl`` on the Stanford release, whose references are already
Moses-tokenized (with ``&apos;``-style escapes). :func:`tokenized_bleu` computes exactly that with sacreBLEU's
``tokenize="none"`` (the text is split on whitespace and nothing else; case-sensitive unless ``lowercase``) and no
smoothing (any zero n-gram precision gives 0), brevity penalty ``exp(1 - r/c)`` when the hypothesis corpus is
shorter, as ``multi-bleu.perl`` does. :func:`sacrebleu_score` is the modern, comparable-across-papers number
(sacreBLEU defaults: 13a tokenization, exp smoothing) on *detokenized* text, reported beside the tokenized score
with its signature; :func:`detokenize` undoes the Moses tokenization with ``sacremoses``' own detokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

# The Moses tokenizer's XML escapes (escape-special-chars), undone in one left-to-right pass so that an escaped
# ampersand followed by text (``&amp;apos;``) becomes the literal ``&apos;``, not an apostrophe.
MOSES_ESCAPES = {"&apos;": "'", "&quot;": '"', "&amp;": "&", "&lt;": "<", "&gt;": ">", "&#91;": "[",
                 "&#93;": "]", "&#124;": "|"}
_ESCAPE = re.compile("|".join(map(re.escape, MOSES_ESCAPES)))


class BleuStats(NamedTuple):
    score: float  # 0-100
    precisions: tuple[float, ...]  # clipped n-gram precisions, 0-100
    brevity_penalty: float
    ratio: float  # hypothesis length / reference length
    hyp_len: int
    ref_len: int


def unescape_moses(text: str) -> str:
    """``&apos;`` -> ``'``, ``&quot;`` -> ``"`` and the other :data:`MOSES_ESCAPES`, in one pass."""
    return _ESCAPE.sub(lambda m: MOSES_ESCAPES[m.group()], text)


@lru_cache(maxsize=8)
def _detokenizer(lang: str):
    from sacremoses import MosesDetokenizer

    return MosesDetokenizer(lang=lang)


def detokenize(text: str, lang: str = "en") -> str:
    """Moses-tokenized text (escapes included) -> plain text, for sacreBLEU: ``sacremoses``' Moses detokenizer
    (clitics such as ``isn 't`` -> ``isn't``, quotes paired, punctuation attached, ``@-@`` joined) after
    :func:`unescape_moses`."""
    return _detokenizer(lang).detokenize(unescape_moses(text).split(), unescape=False)


def _check(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if isinstance(hyps, str) or isinstance(refs, str):
        raise TypeError("hyps and refs are sequences of sentences, not single strings")
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references; they must be aligned one to one")


def multi_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False) -> BleuStats:
    """``multi-bleu.perl`` (one reference per sentence) with its intermediate numbers, computed by sacreBLEU on
    whitespace-separated tokens (``tokenize="none"``, no smoothing)."""
    from sacrebleu.metrics import BLEU

    _check(hyps, refs)
    bleu = BLEU(tokenize="none", smooth_method="none", lowercase=lowercase, force=True)
    s = bleu.corpus_score(list(hyps), [list(refs)])
    ratio = s.sys_len / s.ref_len if s.ref_len else 0.0
    return BleuStats(s.score, tuple(s.precisions), s.bp, ratio, s.sys_len, s.ref_len)


def tokenized_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False) -> float:
    """Corpus BLEU (0-100) on already-tokenized text, as ``multi-bleu.perl`` (the paper's Table 4 metric)."""
    return multi_bleu(hyps, refs, lowercase=lowercase).score


def sacrebleu_score(hyps: Sequence[str], refs: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU corpus score (0-100, default settings) and its signature string; pass detokenized text
    (:func:`detokenize` for Moses-tokenized data), as sacreBLEU applies its own 13a tokenization."""
    from sacrebleu.metrics import BLEU

    _check(hyps, refs)
    bleu = BLEU()
    score = bleu.corpus_score(list(hyps), [list(refs)]).score
    return score, str(bleu.get_signature())
