"""Word tokenizer and vocabulary (built on the training split, cached as JSON)."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable

from coda_exp.io import atomic_write_text

PAD, UNK = "<pad>", "<unk>"
_TOKEN_RE = re.compile(r"\w+(?:[-']\w+)*|[^\w\s]", re.UNICODE)


def tokenize(text: str, lowercase: bool = True) -> list[str]:
    """Words and punctuation marks: ``"Don't stop-now!"`` -> ``["don't", "stop-now", "!"]``."""
    if lowercase:
        text = text.lower()
    return _TOKEN_RE.findall(text)


class Vocab:
    """Maps tokens to ids; id 0 is padding and id 1 the unknown token."""

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = [PAD, UNK]
        seen = set(self.itos)
        for t in tokens:
            if t not in seen:
                self.itos.append(t)
                seen.add(t)
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    pad_id = 0
    unk_id = 1

    def __len__(self) -> int:
        return len(self.itos)

    def extend(self, tokens: Iterable[str]) -> None:
        """Append the tokens not yet in the vocabulary (in order); existing ids never change."""
        for t in tokens:
            if t not in self.stoi:
                self.stoi[t] = len(self.itos)
                self.itos.append(t)

    def encode(self, tokens: Iterable[str]) -> list[int]:
        get = self.stoi.get
        return [get(t, 1) for t in tokens]

    @classmethod
    def build(cls, texts: Iterable[list[str]], min_freq: int = 1, max_size: int | None = None) -> Vocab:
        """Most frequent first (ties alphabetical, so the vocabulary is deterministic)."""
        counts: Counter[str] = Counter()
        for toks in texts:
            counts.update(toks)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max(0, max_size - 2)]
        return cls(ranked)

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(path, json.dumps(self.itos, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        with open(path, encoding="utf-8") as f:
            itos = json.load(f)
        if itos[:2] != [PAD, UNK]:
            raise ValueError(f"{path}: not a coda-exp vocabulary (must start with {PAD!r}, {UNK!r})")
        return cls(itos[2:])
