"""The one word vocabulary of the project (its special ids and :func:`strip_special` live in :mod:`coda_exp.tokens`,
which models and tasks use without the data layer; re-exported here).

Every tokenizer (this vocabulary, BPE, MLU's characters) uses the same special ids: ``pad = 0``, ``bos = 1``,
``eos = 2``, ``unk = 3``; the words follow from id 4 on. A vocabulary is built from the training split (most
frequent first, ties alphabetical, so it is deterministic), read from a released vocabulary file (one token per
line: the Stanford IWSLT'15 ``vocab.en``/``vocab.vi``), or loaded from its JSON cache. Pair tasks feed it token
lists (:meth:`Vocab.lookup` after :func:`tokenize`); sequence tasks text split on whitespace (:meth:`Vocab.encode`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import iter_lines
from coda_exp.io import atomic_write_text
from coda_exp.tokens import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, SPECIAL_TOKENS, UNK, UNK_ID, strip_special

__all__ = ["BOS", "BOS_ID", "EOS", "EOS_ID", "PAD", "PAD_ID", "SPECIAL_TOKENS", "UNK", "UNK_ID", "Vocab",
           "strip_special", "tokenize"]
_TOKEN_RE = re.compile(r"\w+(?:[-']\w+)*|[^\w\s]", re.UNICODE)


def tokenize(text: str, lowercase: bool = True) -> list[str]:
    """Words and punctuation marks: ``"Don't stop-now!"`` -> ``["don't", "stop-now", "!"]``."""
    if lowercase:
        text = text.lower()
    return _TOKEN_RE.findall(text)


class Vocab:
    """Tokens <-> ids: ids 0-3 are :data:`SPECIAL_TOKENS`, then the tokens in order (a repeat keeps its first id).

    It is also a tokenizer (``encode``/``decode``/``vocab_size`` and the special ids) for whitespace-tokenized text.
    """

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, tokens: Iterable[str] = ()):
        self.itos: list[str] = list(SPECIAL_TOKENS)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def extend(self, tokens: Iterable[str]) -> None:
        """Append the tokens not yet in the vocabulary (in order); existing ids never change."""
        for t in tokens:
            if t not in self.stoi:
                self.stoi[t] = len(self.itos)
                self.itos.append(t)

    def lookup(self, tokens: Iterable[str]) -> list[int]:
        """Ids of ``tokens``; a token outside the vocabulary is ``unk``."""
        get = self.stoi.get
        return [get(t, UNK_ID) for t in tokens]

    def encode(self, text: str) -> list[int]:
        """Ids of the whitespace-separated tokens of ``text`` (no special token added)."""
        return self.lookup(text.split())

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        """The tokens of :func:`strip_special` ``(ids)`` joined by single spaces; an id out of range reads ``<unk>``."""
        n = len(self.itos)
        return " ".join(self.itos[i] if 0 <= i < n else UNK for i in strip_special(ids))

    def id_to_token(self, i: int) -> str | None:
        return self.itos[i] if 0 <= i < len(self.itos) else None

    @classmethod
    def build(cls, texts: Iterable[list[str]], min_freq: int = 1, max_size: int | None = None) -> Vocab:
        """From token lists: tokens seen ``min_freq`` times, most frequent first (ties alphabetical), at most
        ``max_size`` entries in all (special tokens included)."""
        counts: Counter[str] = Counter()
        for toks in texts:
            counts.update(toks)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max(0, max_size - len(SPECIAL_TOKENS))]
        return cls(ranked)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Vocab:
        """A released vocabulary, one token per line. The Stanford files start with ``<unk>``, ``<s>``, ``</s>``:
        these are our special tokens already, so the file's other tokens get ids 4, 5, ... in file order."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"vocabulary file {str(path)!r} does not exist")
        tokens = []
        for lineno, tok in iter_lines(path, expected="one token per line"):
            if not tok:
                continue
            if tok != tok.strip() or len(tok.split()) != 1:
                raise DataError(f"{path}:{lineno}: vocabulary entry {tok!r} contains whitespace; "
                                "expected one token per line")
            tokens.append(tok)
        return cls(tokens)

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(path, json.dumps(self.itos, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        try:
            with open(path, encoding="utf-8") as f:
                itos = json.load(f)
        except (ValueError, UnicodeDecodeError) as e:  # a cache file cut short (a full disk), or not one of ours
            raise DataError(f"{path}: not a readable vocabulary file ({e}); delete it and run again, it is rebuilt "
                            "from the training data") from None
        if not isinstance(itos, list) or itos[: len(SPECIAL_TOKENS)] != list(SPECIAL_TOKENS):
            raise DataError(f"{path}: not a coda-exp vocabulary (must start with {list(SPECIAL_TOKENS)})")
        return cls(itos[len(SPECIAL_TOKENS):])
