"""Data: official-format readers (or the hub) -> examples -> vocabulary -> tensors -> batches."""

from coda_exp.data.errors import DataError
from coda_exp.data.pair_datamodule import PairDataModule
from coda_exp.data.readers import READERS, get_reader
from coda_exp.data.vocab import Vocab, tokenize

__all__ = ["READERS", "DataError", "PairDataModule", "Vocab", "get_reader", "tokenize"]
