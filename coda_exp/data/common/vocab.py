"""The one word vocabulary of the project (its special ids and :func:`strip_special` live in :mod:`coda_exp.tokens`,
which models and tasks use without the data layer; re-exported here).

Every tokenizer (this vocabulary, BPE, MLU's characters) uses the same special ids: ``pad = 0``, ``bos = 1``,
``eos = 2``, ``unk = 3``; the words follow from id 4 on. A vocabulary is built from the training split (most
frequent first, ties alphabetical, so it is deterministic), read from a released vocabulary file (one token per
line: the Stanford IWSLT'15 ``vocab.en``/``vocab.vi``), or loaded from its JSON cache. Pair tasks feed it token
lists (:meth:`Vocab.lookup` after :func:`tokenize`); sequence tasks text split on whitespace (:meth:`Vocab.encode`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import iter_lines
from coda_exp.io import atomic_write_text
from coda_exp.tokens import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, SPECIAL_TOKENS, UNK, UNK_ID, strip_special

__all__ = ["BOS", "BOS_ID", "EOS", "EOS_ID", "PAD", "PAD_ID", "SPECIAL_TOKENS", "UNK", "UNK_ID", "Vocab",
           "strip_special", "tokenize"]
log = logging.getLogger(__name__)
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
        """The JSON cache: the tokens with their count and checksum, which :meth:`load` verifies (a file cut short
        at a token boundary is still valid JSON)."""
        atomic_write_text(path, json.dumps({"coda_exp_vocab": CACHE_FORMAT, "size": len(self.itos),
                                            "sha256": _checksum(self.itos), "tokens": self.itos}, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """A vocabulary :meth:`save` wrote; a DataError naming the file (delete it: it is rebuilt) where it cannot be
        read, is not one, or its tokens are not the count and checksum written with them."""
        rebuilt = "delete it and run again, it is rebuilt from the training data"
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        except (ValueError, UnicodeDecodeError) as e:  # a cache file cut short (a full disk), or not one of ours
            raise DataError(f"{path}: not a readable vocabulary file ({e}); {rebuilt}") from None
        if isinstance(saved, list):  # written before the cache carried its count and checksum
            raise DataError(f"{path}: a vocabulary cache without its token count and checksum (an older "
                            f"coda-exp's, or not one of ours), which cannot be verified; {rebuilt}")
        itos = saved.get("tokens") if isinstance(saved, dict) else None
        if not isinstance(itos, list) or itos[: len(SPECIAL_TOKENS)] != list(SPECIAL_TOKENS):
            raise DataError(f"{path}: not a coda-exp vocabulary (its tokens must start with {list(SPECIAL_TOKENS)}); "
                            f"{rebuilt}")
        if saved.get("size") != len(itos) or saved.get("sha256") != _checksum(itos):
            raise DataError(f"{path}: the vocabulary cache holds {len(itos)} tokens, not the {saved.get('size')} "
                            f"with the checksum written with them (cut short or edited); {rebuilt}")
        return cls(itos[len(SPECIAL_TOKENS):])

    @classmethod
    def cached(cls, path: Path, build: Callable[[], Vocab]) -> Vocab:
        """The vocabulary cached at ``path`` (:meth:`load`); ``build()`` and saved there where there is none yet, or
        only one of the older format (a plain list: rebuilt, since it cannot be verified)."""
        if path.is_file():
            try:
                with open(path, encoding="utf-8") as f:
                    legacy = json.load(f)
            except (OSError, ValueError, UnicodeDecodeError):
                legacy = None  # load names it
            if not isinstance(legacy, list):
                return cls.load(path)
            log.info("%s: a vocabulary cache of the older format (no count, no checksum): rebuilt", path)
        vocab = build()
        vocab.save(path)
        return vocab


CACHE_FORMAT = 2  # the JSON cache's format: {"coda_exp_vocab", "size", "sha256", "tokens"} (1: a plain list)


def _checksum(itos: list[str]) -> str:
    return hashlib.sha256(json.dumps(itos, ensure_ascii=False).encode("utf-8")).hexdigest()
