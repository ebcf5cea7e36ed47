"""Data: official-format readers (or the hub) -> examples -> vocabulary -> tensors -> batches."""

from coda_exp.data import readers_nli, readers_ranking  # noqa: F401  (register MNLI, SciTail, DNLI, TrecQA, UDC)
from coda_exp.data.batching import TokenBatchSampler
from coda_exp.data.errors import DataError
from coda_exp.data.pair_datamodule import PairDataModule
from coda_exp.data.readers import READERS, get_reader
from coda_exp.data.seq2seq_datamodule import MLUDataModule, Seq2SeqDataModule
from coda_exp.data.seq2seq_sources import AlgoLispDataModule, IWSLTDataModule
from coda_exp.data.text_datamodule import TextClassificationDataModule
from coda_exp.data.tokenization import BPETokenizer, WordVocabTokenizer, cached_bpe, train_bpe
from coda_exp.data.vocab import Vocab, tokenize

__all__ = [
    "READERS",
    "AlgoLispDataModule",
    "BPETokenizer",
    "DataError",
    "IWSLTDataModule",
    "MLUDataModule",
    "PairDataModule",
    "Seq2SeqDataModule",
    "TextClassificationDataModule",
    "TokenBatchSampler",
    "Vocab",
    "WordVocabTokenizer",
    "cached_bpe",
    "get_reader",
    "tokenize",
    "train_bpe",
]
