"""Sentence pairs: NLI classification (SNLI, MNLI, SciTail, DNLI) and answer ranking (WikiQA, TrecQA, UDC)."""

from coda_exp.data.pair import nli, ranking  # noqa: F401  (register MNLI, SciTail, DNLI, TrecQA, UDC)
from coda_exp.data.pair.datamodule import PairDataModule
from coda_exp.data.pair.readers import PairReader, get_pair_reader

__all__ = ["PairDataModule", "PairReader", "get_pair_reader"]
