"""Tokenizers for the sequence tasks: byte-pair encoding trained locally (word vocabularies: :mod:`.vocab`).

Every tokenizer follows one protocol (:class:`Tokenizer`): ``encode(text) -> list[int]`` (no special tokens
added: the task adds ``bos``/``eos`` where it needs them), ``decode(ids) -> str`` (stops at the first ``eos``,
skips ``pad`` and ``bos``), ``vocab_size``, and the special ids shared by every tokenizer of the project:
``pad = 0``, ``bos = 1``, ``eos = 2``, ``unk = 3`` (:mod:`coda_exp.data.common.vocab`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK, UNK_ID, strip_special
from coda_exp.io import atomic_write_text

METASPACE = "\u2581"  # "▁": marks a word start, so that decoding restores the spaces


@runtime_checkable
class Tokenizer(Protocol):
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class BPETokenizer:
    """Byte-pair encoding (Sennrich et al. 2016) with HF ``tokenizers``, trained on our own training text.

    Pipeline: whitespace runs -> one space, stripped; words are split at spaces (each word start marked with
    ``▁``) and every punctuation mark is its own pre-token; BPE merges within pre-tokens; the decoder turns ``▁``
    back into spaces, so ``decode(encode(t)) == t`` for any text with single spaces and only characters seen in
    training (unseen characters become ``unk`` and decode as ``<unk>``). The special tokens are vocabulary
    entries 0-3 only, never matched in the input text: a literal ``"<s>"`` in a review is encoded as ``<``,
    ``s``, ``>``.
    """

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, hf_tokenizer):
        self.hf = hf_tokenizer
        got = [self.hf.token_to_id(t) for t in SPECIAL_TOKENS]
        if got != [PAD_ID, BOS_ID, EOS_ID, UNK_ID]:
            raise ValueError(f"BPE vocabulary has special tokens {SPECIAL_TOKENS} at ids {got}; expected 0, 1, 2, 3")

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> BPETokenizer:
        from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
        from tokenizers import Tokenizer as HFTokenizer

        hf = HFTokenizer(models.BPE(unk_token=UNK))
        hf.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True),
            pre_tokenizers.Punctuation(behavior="isolated")])
        hf.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=list(SPECIAL_TOKENS), show_progress=False)
        hf.train_from_iterator(texts, trainer)
        # keep <pad>/<s>/</s>/<unk> as vocabulary entries but stop matching them inside input text
        spec = json.loads(hf.to_str())
        spec["added_tokens"] = []
        return cls(HFTokenizer.from_str(json.dumps(spec)))

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode(strip_special(ids), skip_special_tokens=False)

    def id_to_token(self, i: int) -> str | None:
        return self.hf.id_to_token(i)

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(Path(path), self.hf.to_str())

    @classmethod
    def load(cls, path: str | os.PathLike) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        try:
            return cls(HFTokenizer.from_file(str(path)))
        except Exception as e:  # the Rust side raises plain Exceptions for unreadable files
            raise DataError(f"{path}: not a readable BPE tokenizer file ({e})") from e


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> BPETokenizer:
    """Learn a BPE vocabulary of at most ``vocab_size`` entries (4 special tokens included) on ``texts``.

    Merges stop early when no pair occurs ``min_frequency`` times, so small corpora get smaller vocabularies.
    """
    return BPETokenizer.train(texts, vocab_size=vocab_size, min_frequency=min_frequency)


def cached_bpe(texts: Iterable[str] | Callable[[], Iterable[str]], fingerprint: str, vocab_size: int,
               cache_dir: str | os.PathLike, min_frequency: int = 2) -> tuple[BPETokenizer, Path]:
    """Train once per (data fingerprint, vocab size, min frequency), store as ``cache_dir/bpe-<key>.json``.

    ``texts`` may be a callable so that the corpus is only read when no cached tokenizer exists.
    Returns the tokenizer and its file.
    """
    key = hashlib.sha1(json.dumps(["bpe-v1", fingerprint, vocab_size, min_frequency]).encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"bpe-{key}.json"
    if path.is_file():
        return BPETokenizer.load(path), path
    tok = train_bpe(texts() if callable(texts) else texts, vocab_size, min_frequency)
    tok.save(path)
    return tok, path


class CharTokenizer:
    """Characters to ids: the special ids 0-3, then ``chars`` in order (MLU: 4 + 17 ids)."""

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID
    UNK_CHAR = "\ufffd"  # what decode writes for an unknown id

    def __init__(self, chars: str):
        if len(set(chars)) != len(chars):
            raise ValueError(f"duplicate characters in {chars!r}")
        self.chars = chars
        self.stoi = {c: i + len(SPECIAL_TOKENS) for i, c in enumerate(chars)}
        self._lut = np.full(max(map(ord, chars), default=0) + 2, UNK_ID, dtype=np.int64)
        self._lut[[ord(c) for c in chars]] = list(self.stoi.values())

    def __len__(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.chars)

    vocab_size = property(__len__)

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        get = self.stoi.get
        ids = [get(c, UNK_ID) for c in text]
        return ([BOS_ID] if bos else []) + ids + ([EOS_ID] if eos else [])

    def encode_padded(self, texts: list[str], bos: bool = False, eos: bool = False,
                      width: int | None = None) -> torch.Tensor:
        """A batch at once: (batch, longest + bos + eos) int64 ids, 0-padded; same ids as :meth:`encode`.
        ``width``: pad every row to this many ids instead (static shapes); ValueError when a row needs more."""
        lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        ids = self._lut[np.minimum(codes, len(self._lut) - 1)]  # the LUT's last slot is unk
        off = int(bos)
        need = int(lens.max(initial=0)) + off + int(eos)
        if width is not None and need > width:
            longest = texts[int(lens.argmax())]
            raise ValueError(f"{longest!r} needs {need} ids (with bos={bos}, eos={eos}), more than the static "
                             f"width {width}")
        out = np.full((len(texts), need if width is None else width), PAD_ID, dtype=np.int64)
        cols = np.arange(out.shape[1])
        out[(cols >= off) & (cols < lens[:, None] + off)] = ids  # row-major order = concatenation order
        if bos:
            out[:, 0] = BOS_ID
        if eos:
            out[np.arange(len(texts)), lens + off] = EOS_ID
        return torch.from_numpy(out)

    def decode(self, ids) -> str:
        """Characters of :func:`strip_special` ``(ids)``; unknown ids read as U+FFFD."""
        n = len(SPECIAL_TOKENS)
        return "".join(self.chars[i - n] if n <= i < len(self) else self.UNK_CHAR for i in strip_special(ids))
