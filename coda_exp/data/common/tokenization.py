"""Tokenizers for the sequence tasks: byte-pair encoding trained locally, and fixed word vocabularies.

Every tokenizer follows one protocol (:class:`Tokenizer`): ``encode(text) -> list[int]`` (no special tokens
added: the task adds ``bos``/``eos`` where it needs them), ``decode(ids) -> str`` (stops at the first ``eos``,
skips ``pad`` and ``bos``), ``vocab_size``, and the special ids shared by every tokenizer of the project:
``pad = 0``, ``bos = 1``, ``eos = 2``, ``unk = 3``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from coda_exp.data.common.errors import DataError
from coda_exp.io import atomic_write_text

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # at ids 0, 1, 2, 3
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


def content_ids(ids: Iterable[int]) -> list[int]:
    """``ids`` up to (not including) the first ``eos``, without ``pad`` and ``bos``; accepts tensors too."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    out: list[int] = []
    for i in ids:
        i = int(i)
        if i == EOS_ID:
            break
        if i not in (PAD_ID, BOS_ID):
            out.append(i)
    return out


class _Specials:
    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]  # type: ignore[attr-defined]


class BPETokenizer(_Specials):
    """Byte-pair encoding (Sennrich et al. 2016) with HF ``tokenizers``, trained on our own training text.

    Pipeline: whitespace runs -> one space, stripped; words are split at spaces (each word start marked with
    ``▁``) and every punctuation mark is its own pre-token; BPE merges within pre-tokens; the decoder turns ``▁``
    back into spaces, so ``decode(encode(t)) == t`` for any text with single spaces and only characters seen in
    training (unseen characters become ``unk`` and decode as ``<unk>``). The special tokens are vocabulary
    entries 0-3 only, never matched in the input text: a literal ``"<s>"`` in a review is encoded as ``<``,
    ``s``, ``>``.
    """

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
        return self.hf.decode(content_ids(ids), skip_special_tokens=False)

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


class WordVocabTokenizer(_Specials):
    """A fixed word vocabulary, one token per line (the Stanford IWSLT'15 ``vocab.en`` / ``vocab.vi``).

    The Stanford files start with ``<unk>``, ``<s>``, ``</s>``; these map to our ``unk``/``bos``/``eos`` and
    ``<pad>`` is added, so the ids are: 0 ``<pad>``, 1 ``<s>``, 2 ``</s>``, 3 ``<unk>``, then the file's other
    tokens in file order (a repeated token keeps its first id). Text is split on whitespace only (the Stanford
    files are already tokenized); a word not in the vocabulary is ``unk``. ``decode`` joins with single spaces.
    """

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = list(SPECIAL_TOKENS)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        for t in tokens:
            if t not in self.stoi:
                self.stoi[t] = len(self.itos)
                self.itos.append(t)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> WordVocabTokenizer:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"vocabulary file {str(path)!r} does not exist")
        tokens = []
        with open(path, encoding="utf-8-sig", newline="") as f:  # -sig: tolerate a byte-order mark
            for lineno, line in enumerate(f.read().split("\n"), 1):
                tok = line.rstrip("\r")
                if not tok:
                    continue
                if tok != tok.strip() or len(tok.split()) != 1:
                    raise DataError(f"{path}:{lineno}: vocabulary entry {tok!r} contains whitespace; "
                                    "expected one token per line")
                tokens.append(tok)
        if not tokens:
            raise DataError(f"{path}: empty vocabulary file; expected one token per line")
        return cls(tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        get = self.stoi.get
        return [get(t, UNK_ID) for t in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.itos[i] if 0 <= i < len(self.itos) else UNK for i in content_ids(ids))

    def id_to_token(self, i: int) -> str | None:
        return self.itos[i] if 0 <= i < len(self.itos) else None
