"""From a question's passages to one context, its tokens and the gold span (CoDA Table 1's DecaProp pipeline).

- The passages are joined into one context (a space between two passages).
- Tokens are words and punctuation marks (:func:`coda_exp.data.common.vocab.tokenize`'s rule), each kept with the
  whitespace that follows it in the context (``"".join(tokens[i: j + 1]).strip()`` is the context's text of the
  span ``i..j``: the predicted answer keeps "U.S." as written).
- The gold span is the first occurrence of the answer's tokens in the context after SQuAD-style normalisation of
  each token (lower case, punctuation and the articles a/an/the dropped): the same normalisation the metric
  applies to the answer text (:mod:`coda_exp.metrics.squad`; ``data`` does not import ``metrics``, so the rule is
  restated here and a test checks that both agree).
- A training context is cut to ``cap`` tokens: ``window`` centres the cut on the answer (DecaProp's SearchQA
  pipeline: a window around the first answer occurrence), ``all`` keeps the first ``cap`` tokens (a span beyond
  them is lost: the example is dropped and counted).
"""

from __future__ import annotations

import re
import string

_TOKEN_RE = re.compile(r"(\w+(?:[-']\w+)*|[^\w\s])(\s*)", re.UNICODE)
_PUNCT = set(string.punctuation)
ARTICLES = frozenset({"a", "an", "the"})
TRAIN_CONTEXTS = ("window", "all")


def join_passages(passages: list[str]) -> str:
    return " ".join(p.strip() for p in passages if p.strip())


def tokens_with_space(text: str) -> list[str]:
    """Each word or punctuation mark of ``text`` followed by its trailing whitespace."""
    return [m.group(0) for m in _TOKEN_RE.finditer(text)]


def norm_token(token: str) -> str:
    """A token as the SQuAD normalisation leaves it: lower case, no punctuation; "" for articles and punctuation."""
    t = "".join(c for c in token.strip().lower() if c not in _PUNCT)
    return "" if t in ARTICLES else t


def find_span(context: list[str], answer: list[str]) -> tuple[int, int] | None:
    """``(start, end)`` (inclusive token indices of ``context``) of the first occurrence of ``answer`` after
    :func:`norm_token` (tokens that normalise to "" are skipped on both sides); None when it does not occur."""
    target = [t for t in (norm_token(a) for a in answer) if t]
    if not target:
        return None
    kept = [(i, n) for i, n in ((i, norm_token(t)) for i, t in enumerate(context)) if n]
    words = [n for _, n in kept]
    k = len(target)
    first = target[0]
    for p in range(len(words) - k + 1):
        if words[p] == first and words[p: p + k] == target:
            return kept[p][0], kept[p + k - 1][0]
    return None


def window(length: int, span: tuple[int, int], size: int) -> int:
    """The first token of a ``size``-token window of a ``length``-token context centred on ``span``."""
    if length <= size:
        return 0
    mid = (span[0] + span[1]) // 2
    return max(0, min(mid - size // 2, length - size))


def cut_training(context: list[str], span: tuple[int, int], cap: int | None, mode: str
                 ) -> tuple[int, tuple[int, int]] | None:
    """``(offset, span within the cut)`` of a training context cut to ``cap`` tokens by ``mode`` (window | all),
    or None when the span does not fit (longer than ``cap``, or beyond the first ``cap`` tokens in ``all``)."""
    if cap is None or len(context) <= cap:
        return 0, span
    if span[1] - span[0] + 1 > cap:
        return None
    start = window(len(context), span, cap) if mode == "window" else 0
    if span[1] >= start + cap:
        return None
    return start, (span[0] - start, span[1] - start)
