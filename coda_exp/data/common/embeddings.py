"""Pretrained word vectors (GloVe or word2vec *text* format) for a vocabulary.

The file is read and checked by :class:`~coda_exp.data.common.vectors_file.VectorsFile` (its layout, the count
of numbers on every line, finite values, gzip). Words of the vocabulary missing from the
file (OOV) get random vectors drawn with the spread of the found ones; the padding row is zero.

What vectors a run used is recorded by what they are, not where they lie (:func:`vectors_identity`: the file's
name without its extensions, its dimension, its size and a hash of its first MiB), so the same file at another path
is the same configuration (``coda_exp.fingerprint``).
"""

from __future__ import annotations

import hashlib
import logging
import os

import torch
from pytorch_lightning.utilities import rank_zero_only

from coda_exp.data.common.vectors_file import VectorsFile
from coda_exp.data.common.vocab import SPECIAL_TOKENS, Vocab
from coda_exp.fingerprint import vectors_name

log = logging.getLogger(__name__)


HEAD_BYTES = 1 << 20  # the part of a vectors file hashed into its identity (cheap for a 5 GB file)


def vectors_identity(path: str | os.PathLike | None) -> dict | None:
    """What a vectors file is, for the run record and the configuration fingerprint: ``name``
    (``coda_exp.fingerprint.vectors_name``), ``file`` (its name), ``dim`` (from the first line), ``count`` (the word2vec header's
    number of vectors; None for GloVe, which has no header), ``bytes`` (its size) and ``sha256_head`` (16 hex digits
    of the SHA-256 of its first MiB and its size: two files that agree on it are taken to be the same). None without
    a path; a missing or unreadable file is the :class:`DataError` :func:`load_pretrained` raises."""
    if not path:
        return None
    vectors = VectorsFile.open(path)
    path, size = vectors.path, vectors.path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(HEAD_BYTES))
    digest.update(str(size).encode())
    return {"name": vectors_name(path), "file": path.name, "dim": vectors.dim, "count": vectors.count, "bytes": size,
            "sha256_head": digest.hexdigest()[:16]}


LOW_COVERAGE = 0.5  # below this share of the vocabulary found in a vectors file, a warning (GloVe covers ~90 %+)


def load_pretrained(path: str | os.PathLike, vocab: Vocab, lowercase: bool = True, seed: int = 0,
                    extra_words: set[str] | None = None) -> tuple[torch.Tensor, int]:
    """Return ``(matrix (len(vocab), dim), number of vocabulary words found in the file)``.

    ``extra_words`` (words outside ``vocab``, e.g. those only the development and test texts contain): the ones
    the file has a vector for are appended to ``vocab`` in place (in the file's order) before the matrix is built,
    so frozen pretrained vectors cover them instead of ``<unk>``; words the file lacks stay unknown. One pass over
    the file either way.
    """
    vectors = VectorsFile.open(path)
    path, dim = vectors.path, vectors.dim
    found: dict[int, torch.Tensor] = {}
    extra_found: dict[str, torch.Tensor] = {}
    extra_words = extra_words or set()
    for lineno, word, tail in vectors.lines():
        if lowercase:
            word = word.lower()
        idx = vocab.stoi.get(word)
        is_extra = idx is None and word in extra_words and word not in extra_found
        if not is_extra and (idx is None or idx in found or idx == vocab.pad_id):
            continue  # with lowercasing, the first (most frequent) casing wins
        vec = torch.tensor(vectors.vector(lineno, word, tail))
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
    # the coverage of the words, counted apart from <pad>, <bos>, <eos>, <unk> (a file may hold a vector for <unk>):
    # the count, its total and its percentage over the same words
    words = len(vocab) - len(SPECIAL_TOKENS)
    covered = sum(1 for idx in found if idx >= len(SPECIAL_TOKENS))
    share = covered / max(1, words)
    log.info("embeddings %s: %d of %d vocabulary words found (%.1f%%; the %d special tokens apart), dim %d", path,
             covered, words, 100.0 * share, len(SPECIAL_TOKENS), dim)
    if share < LOW_COVERAGE and rank_zero_only.rank == 0:  # quiet runs show warnings only: a wrong file would
        # otherwise train on random vectors unnoticed (once under DDP: every rank reads the same file)
        log.warning("embeddings %s have a vector for only %d of the %d vocabulary words (%.1f%%); the others are "
                    "random. Is it the right file (its language, its casing: data.lowercase=%s)?", path, covered,
                    words, 100.0 * share, lowercase)
    return matrix, len(found)
