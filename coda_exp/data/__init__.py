"""Data, one folder per task family: official-format readers (or the hub) -> examples -> vocabulary -> tensors.

- ``common/``: errors, file reading, split names, the word vocabulary, tokenizers, pretrained vectors, batching;
- ``pair/``: sentence-pair classification and ranking (SNLI, MNLI, SciTail, DNLI, WikiQA, TrecQA, UDC);
- ``text/``: single-text classification (IMDb, SST);
- ``seq2seq/``: sequence to sequence (MLU, AlgoLisp, IWSLT'15).
"""

from coda_exp.data.common.batching import TokenBatchSampler
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.tokenization import BPETokenizer, WordVocabTokenizer, cached_bpe, train_bpe
from coda_exp.data.common.vocab import Vocab, tokenize
from coda_exp.data.pair import READERS, PairDataModule, get_reader
from coda_exp.data.seq2seq import AlgoLispDataModule, IWSLTDataModule, MLUDataModule, Seq2SeqDataModule
from coda_exp.data.text import TextClassificationDataModule

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
