"""Pretrained word vectors (GloVe or word2vec *text* format) for a vocabulary.

GloVe files have no header; word2vec text files start with ``<count> <dim>``. GloVe 840B contains a few tokens
with spaces, so the vector is taken as the last ``dim`` fields of a line. Words of the vocabulary missing from the
file (OOV) get random vectors drawn with the spread of the found ones; the padding row is zero.

What vectors a run used is recorded by what they are, not where they lie (:func:`vectors_identity`: the file's
name without its extensions, its dimension, its size and a hash of its first MiB), so the same file at another path
is the same configuration (``coda_exp.fingerprint``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import torch
from pytorch_lightning.utilities import rank_zero_only

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.vocab import SPECIAL_TOKENS, Vocab
from coda_exp.fingerprint import vectors_name

log = logging.getLogger(__name__)


def _first_line(path: Path) -> list[str]:
    with open(path, "rb") as f:
        head = f.readline()
    try:
        return head.decode("utf-8").rstrip("\n").rstrip().split(" ")
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a UTF-8 text file; binary word2vec (.bin) is not supported, "
                        "convert it to the text format first") from None


def _vectors_file(path: str | os.PathLike) -> tuple[Path, list[str], bool]:
    """(path, the first line's fields, whether that line is a word2vec header "count dim"); a missing file is a
    :class:`DataError` naming ``data.embeddings.path``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"embeddings file {str(path)!r} does not exist; set data.embeddings.path to a GloVe or "
                        "word2vec text file, or null for random initialisation")
    first = _first_line(path)
    return path, first, len(first) == 2 and all(x.isdigit() for x in first)


HEAD_BYTES = 1 << 20  # the part of a vectors file hashed into its identity (cheap for a 5 GB file)


def vectors_identity(path: str | os.PathLike | None) -> dict | None:
    """What a vectors file is, for the run record and the configuration fingerprint: ``name``
    (``coda_exp.fingerprint.vectors_name``), ``file`` (its name), ``dim`` (from the first line), ``count`` (the word2vec header's
    number of vectors; None for GloVe, which has no header), ``bytes`` (its size) and ``sha256_head`` (16 hex digits
    of the SHA-256 of its first MiB and its size: two files that agree on it are taken to be the same). None without
    a path; a missing or unreadable file is the :class:`DataError` :func:`load_pretrained` raises."""
    if not path:
        return None
    path, first, header = _vectors_file(path)
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(HEAD_BYTES))
    digest.update(str(size).encode())
    return {"name": vectors_name(path), "file": path.name, "dim": int(first[1]) if header else len(first) - 1,
            "count": int(first[0]) if header else None, "bytes": size, "sha256_head": digest.hexdigest()[:16]}


LOW_COVERAGE = 0.5  # below this share of the vocabulary found in a vectors file, a warning (GloVe covers ~90 %+)


def load_pretrained(path: str | os.PathLike, vocab: Vocab, lowercase: bool = True, seed: int = 0,
                    extra_words: set[str] | None = None) -> tuple[torch.Tensor, int]:
    """Return ``(matrix (len(vocab), dim), number of vocabulary words found in the file)``.

    ``extra_words`` (words outside ``vocab``, e.g. those only the development and test texts contain): the ones
    the file has a vector for are appended to ``vocab`` in place (in the file's order) before the matrix is built,
    so frozen pretrained vectors cover them instead of ``<unk>``; words the file lacks stay unknown. One pass over
    the file either way.
    """
    path, first, has_header = _vectors_file(path)
    dim = int(first[1]) if has_header else len(first) - 1
    if dim < 1:
        raise DataError(f"{path}:1: cannot infer the vector size from the first line")
    found: dict[int, torch.Tensor] = {}
    extra_found: dict[str, torch.Tensor] = {}
    extra_words = extra_words or set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if has_header and lineno == 1:
                continue
            parts = line.rstrip("\n").rstrip().split(" ")
            if len(parts) < dim + 1:
                if not line.strip():
                    continue
                raise DataError(f"{path}:{lineno}: expected a word and {dim} numbers, got {len(parts)} fields")
            word = " ".join(parts[:-dim])
            if lowercase:
                word = word.lower()
            idx = vocab.stoi.get(word)
            is_extra = idx is None and word in extra_words and word not in extra_found
            if not is_extra and (idx is None or idx in found or idx == vocab.pad_id):
                continue  # with lowercasing, the first (most frequent) casing wins
            try:
                vec = torch.tensor([float(x) for x in parts[-dim:]])
            except ValueError:
                raise DataError(f"{path}:{lineno}: non-numeric vector component for {word!r}") from None
            if is_extra:
                extra_found[word] = vec
            else:
                found[idx] = vec
    if extra_found:
        vocab.extend(extra_found)
        found.update((vocab.stoi[w], v) for w, v in extra_found.items())
    gen = torch.Generator().manual_seed(seed)
    if found:
        stacked = torch.stack(list(found.values()))
        std = stacked.std().item() if stacked.numel() > 1 else 1.0
    else:
        std = 1.0
    matrix = torch.randn(len(vocab), dim, generator=gen) * std
    for idx, vec in found.items():
        matrix[idx] = vec
    matrix[vocab.pad_id] = 0.0
    words = len(vocab) - len(SPECIAL_TOKENS)  # <pad>, <bos>, <eos>, <unk> have no vector in any file
    share = len(found) / max(1, words)
    log.info("embeddings %s: %d of %d vocabulary words found (%.1f%%), dim %d", path, len(found), len(vocab),
             100.0 * share, dim)
    if share < LOW_COVERAGE and rank_zero_only.rank == 0:  # quiet runs show warnings only: a wrong file would
        # otherwise train on random vectors unnoticed (once under DDP: every rank reads the same file)
        log.warning("embeddings %s have a vector for only %d of the %d vocabulary words (%.1f%%); the others are "
                    "random. Is it the right file (its language, its casing: data.lowercase=%s)?", path, len(found),
                    words, 100.0 * share, lowercase)
    return matrix, len(found)
