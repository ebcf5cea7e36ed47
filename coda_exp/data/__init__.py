"""Data, one folder per task family: official-format readers (or the hub) -> examples -> vocabulary -> tensors.

- ``common/``: errors, file reading, split names, the reader base, the word vocabulary and special ids,
  tokenizers, pretrained vectors, batching, the base DataModule;
- ``pair/``: sentence-pair classification and ranking (SNLI, MNLI, SciTail, DNLI, WikiQA, TrecQA, UDC);
- ``text/``: single-text classification (IMDb, SST);
- ``seq2seq/``: sequence to sequence (MLU, AlgoLisp, IWSLT'15).

The names below are imported on first use, so that ``coda_exp.data.common`` (special ids, ``strip_special``)
can be imported without loading every family and the ``datasets`` library.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DataError": "coda_exp.data.common.errors",
    "DataModule": "coda_exp.data.common.base",
    "READERS": "coda_exp.data.common.readers",
    "Reader": "coda_exp.data.common.readers",
    "get_reader": "coda_exp.data.common.readers",
    "SPLITS": "coda_exp.data.common.splits",
    "TokenBatchSampler": "coda_exp.data.common.batching",
    "BPETokenizer": "coda_exp.data.common.tokenization",
    "CharTokenizer": "coda_exp.data.common.tokenization",
    "cached_bpe": "coda_exp.data.common.tokenization",
    "train_bpe": "coda_exp.data.common.tokenization",
    "Vocab": "coda_exp.data.common.vocab",
    "strip_special": "coda_exp.data.common.vocab",
    "tokenize": "coda_exp.data.common.vocab",
    "PairDataModule": "coda_exp.data.pair",
    "PairReader": "coda_exp.data.pair",
    "TextClassificationDataModule": "coda_exp.data.text",
    "TextReader": "coda_exp.data.text",
    "AlgoLispDataModule": "coda_exp.data.seq2seq",
    "IWSLTDataModule": "coda_exp.data.seq2seq",
    "MLUDataModule": "coda_exp.data.seq2seq",
    "Seq2SeqDataModule": "coda_exp.data.seq2seq",
}
_FAMILIES = ("coda_exp.data.pair", "coda_exp.data.text", "coda_exp.data.seq2seq")  # register their readers

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'coda_exp.data' has no attribute {name!r}")
    if name in ("READERS", "get_reader"):
        for family in _FAMILIES:
            importlib.import_module(family)
    return getattr(importlib.import_module(_EXPORTS[name]), name)
