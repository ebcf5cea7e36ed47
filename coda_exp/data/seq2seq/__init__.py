"""Sequence to sequence: MLU (generated), AlgoLisp and IWSLT'15 En-Vi."""

from coda_exp.data.seq2seq import mlu  # noqa: F401  (registers the MLU file reader)
from coda_exp.data.seq2seq.datamodule import MLUDataModule, Seq2SeqDataModule
from coda_exp.data.seq2seq.sources import AlgoLispDataModule, IWSLTDataModule

__all__ = ["AlgoLispDataModule", "IWSLTDataModule", "MLUDataModule", "Seq2SeqDataModule"]
