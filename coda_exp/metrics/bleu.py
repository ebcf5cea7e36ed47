"""Corpus BLEU (Papineni et al. 2002) three ways, all from sacreBLEU's n-gram statistics.

- :func:`t2t_bleu` (``bleu_t2t``): Tensor2Tensor's ``t2t-bleu`` (``tensor2tensor.utils.bleu_hook.bleu_wrapper``),
  the metric of the CoDA paper's IWSLT'15 En→Vi numbers (Table 4: Transformer 28.43, the stefan-it/nmt-en-vi
  result of T2T 1.9.0 ``translate_envi_iwslt32k`` with checkpoint averaging, "cased"; CoDA 29.84; Tables 8-9).
  t2t-bleu reads the decoded text and the reference line as they are: on the Stanford release both are
  Moses-tokenized text with the ``&apos;``-style escapes left in (T2T's subword decoder gives back text in the
  training files' form), and it unescapes nothing. Both sides are split with mteval-v14's international
  tokenization (T2T's ``bleu_tokenize``: punctuation split off unless it stands between digits, every symbol split
  off), which is sacreBLEU's ``tokenize="intl"`` (its regexes say ``\\P{N}`` where T2T's say ``[^\\d]``: they differ
  only beside numbers that are not decimal digits, such as ``½``): ``it &apos;s`` is the five tokens
  ``it & apos ; s`` and ``mat.`` the two ``mat .``. The score is T2T's ``compute_bleu``: corpus BLEU-4 on clipped
  counts, brevity penalty ``exp(1 - r/c)`` when the hypotheses are shorter; an order with n-grams but no match gets
  T2T's smoothing ``1 / (2**k * total)`` (its k-th such order), an order with no n-gram at all (every sentence
  shorter than n tokens) is left out of the sum of logs, which is still divided by 4. On a real test set every
  order has matches and the score is sacreBLEU's with ``smooth_method="none"``. Case-sensitive (t2t-bleu's
  "cased", the 28.43) unless ``lowercase`` (its "uncased").
- :func:`tokenized_bleu` (``bleu_tok``): the usual tokenized BLEU of this corpus, ``multi-bleu.perl`` on the
  release's whitespace tokens (sacreBLEU's ``tokenize="none"``, no smoothing: any zero n-gram precision gives 0),
  case-sensitive unless ``lowercase``. Not the paper's metric: ``it &apos;s`` is two tokens here, five for t2t-bleu.
- :func:`sacrebleu_score` (``bleu``): the modern, comparable-across-papers number (sacreBLEU defaults: 13a
  tokenization, exp smoothing) on *detokenized* text, reported with its signature; :func:`detokenize` undoes the
  Moses tokenization with ``sacremoses``' own detokenizer.
"""

from __future__ import annotations

import math
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
    if not hyps:
        raise ValueError("no sentences: BLEU is not defined over an empty corpus")


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
    """Corpus BLEU (0-100) on already-tokenized text, as ``multi-bleu.perl`` (not the paper's metric: see
    :func:`t2t_bleu`)."""
    return multi_bleu(hyps, refs, lowercase=lowercase).score


def t2t_combine(matches: Sequence[int], totals: Sequence[int], hyp_len: int, ref_len: int) -> BleuStats:
    """T2T ``compute_bleu``'s score from corpus statistics (clipped n-gram matches and n-gram counts per order,
    hypothesis and reference lengths): see the module docstring for its smoothing and brevity penalty."""
    precisions, smooth = [], 1.0
    for m, n in zip(matches, totals):
        if n == 0:
            precisions.append(0.0)  # no n-gram of this order: left out of the logs below
        elif m == 0:
            smooth *= 2
            precisions.append(1.0 / (smooth * n))
        else:
            precisions.append(m / n)
    geo_mean = math.exp(sum(math.log(p) for p in precisions if p) / len(precisions)) if max(precisions) > 0 else 0.0
    ratio = hyp_len / ref_len if ref_len else 0.0
    bp = 1.0 if not ref_len or ratio >= 1.0 else (math.exp(1 - 1 / ratio) if ratio > 0 else 0.0)
    return BleuStats(100 * geo_mean * bp, tuple(100 * p for p in precisions), bp, ratio, hyp_len, ref_len)


def t2t_bleu_stats(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False) -> BleuStats:
    """:func:`t2t_bleu` with its intermediate numbers (precisions after T2T's smoothing, 0-100)."""
    from sacrebleu.metrics import BLEU

    _check(hyps, refs)
    s = BLEU(tokenize="intl", smooth_method="none", lowercase=lowercase, force=True).corpus_score(list(hyps),
                                                                                                  [list(refs)])
    return t2t_combine(s.counts, s.totals, s.sys_len, s.ref_len)


def t2t_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = False) -> float:
    """Corpus BLEU (0-100) as Tensor2Tensor's ``t2t-bleu`` computes it (the paper's IWSLT metric): on the text as it
    is, with mteval-v14's international tokenization; cased unless ``lowercase`` (module docstring)."""
    return t2t_bleu_stats(hyps, refs, lowercase=lowercase).score


def sacrebleu_score(hyps: Sequence[str], refs: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU corpus score (0-100, default settings) and its signature string; pass detokenized text
    (:func:`detokenize` for Moses-tokenized data), as sacreBLEU applies its own 13a tokenization."""
    from sacrebleu.metrics import BLEU

    _check(hyps, refs)
    bleu = BLEU()
    score = bleu.corpus_score(list(hyps), [list(refs)]).score
    return score, str(bleu.get_signature())
