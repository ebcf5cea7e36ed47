"""Corpus BLEU (Papineni et al. 2002) two ways: sacreBLEU on detokenized text, and ``multi-bleu.perl`` on tokens.

The CoDA paper's IWSLT'15 En→Vi numbers (Table 4: Transformer 28.43, CoDA 29.84; Tables 8-9) are *tokenized*
BLEU: computed by Tensor2Tensor / ``multi-bleu.perl`` on the Stanford release, whose references are already
Moses-tokenized (with ``&apos;``-style escapes). :func:`tokenized_bleu` computes exactly that: the hypotheses
and references are split on whitespace and nothing else (no further tokenization, case-sensitive unless
``lowercase``), clipped n-gram precisions for n = 1..4, geometric mean without smoothing (any zero precision
gives 0), brevity penalty ``exp(1 - r/c)`` when the hypothesis corpus is shorter, as ``multi-bleu.perl`` does.
:func:`sacrebleu_score` is the modern, comparable-across-papers number (sacreBLEU defaults: 13a tokenization,
exp smoothing) on *detokenized* text; report it beside the tokenized score with its signature. The Stanford text
is tokenized, so the IWSLT data module first runs both hypotheses and references through :func:`detokenize`, our
own small inverse of the Moses tokenizer (below); ``bleu_tok`` stays on the tokenized text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

_ASCII_WS = re.compile(r"[ \t\n\r\f\v]+")  # Perl's split ' ' on bytes: ASCII whitespace only

# The Moses tokenizer's XML escapes (escape-special-chars), undone in one left-to-right pass so that an escaped
# ampersand followed by text (``&amp;apos;``) becomes the literal ``&apos;``, not an apostrophe.
MOSES_ESCAPES = {"&apos;": "'", "&quot;": '"', "&amp;": "&", "&lt;": "<", "&gt;": ">", "&#91;": "[",
                 "&#93;": "]", "&#124;": "|"}
_ESCAPE = re.compile("|".join(map(re.escape, MOSES_ESCAPES)))
_CLOSING = frozenset(".,!?:;%)]}")  # a token made only of these joins the previous one: "mat ." -> "mat."
_OPENING = frozenset("([{")  # a token made only of these joins the next one: "( a" -> "(a"
_CLITIC = re.compile(r"^(?:n't|'(?:s|re|ve|m|ll|d))$", re.IGNORECASE)  # "do n't" -> "don't", "it 's" -> "it's"


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


def detokenize(text: str) -> str:
    """Moses-tokenized text -> plain text, for sacreBLEU: a small inverse of the Moses tokenizer.

    Rules, on whitespace-separated tokens after :func:`unescape_moses`: a token made only of ``. , ! ? : ; % ) ]
    }`` and an English clitic (``n't``, ``'s``, ``'re``, ``'ve``, ``'m``, ``'ll``, ``'d``) join the previous token;
    a token made only of ``( [ {`` joins the next one; ``"`` alternates between opening (joins the next token)
    and closing (joins the previous one); ``@-@`` (aggressive hyphen splitting) joins both neighbours with ``-``.
    Everything else is left as is (a lone ``'`` keeps its spaces: quote or possessive cannot be told apart).
    """
    out: list[str] = []
    glue_next = False  # the previous token takes no space after it
    quotes = 0
    for tok in unescape_moses(text).split():
        if tok == "@-@":
            out.append("-")
            glue_next = True
            continue
        opening_quote = tok == '"' and quotes % 2 == 0
        quotes += tok == '"'
        closes = (tok == '"' and not opening_quote) or set(tok) <= _CLOSING or bool(_CLITIC.match(tok))
        if out and not glue_next and not closes:
            out.append(" ")
        out.append(tok)
        glue_next = opening_quote or set(tok) <= _OPENING
    return "".join(out)


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
    """sacreBLEU corpus score (0-100, default settings) and its signature string; pass detokenized text
    (:func:`detokenize` for Moses-tokenized data), as sacreBLEU applies its own 13a tokenization."""
    from sacrebleu.metrics import BLEU

    _check(hyps, refs)
    bleu = BLEU()
    score = bleu.corpus_score(list(hyps), [list(refs)]).score
    return score, str(bleu.get_signature())
