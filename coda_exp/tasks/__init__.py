"""LightningModules, one per task family; they own loss, decoding and metrics."""

from coda_exp.tasks.base import TaskModule
from coda_exp.tasks.classification import PairClassificationTask
from coda_exp.tasks.evidence import EvidenceClassificationTask
from coda_exp.tasks.ranking import RankingTask
from coda_exp.tasks.seq2seq import Seq2SeqTask
from coda_exp.tasks.span import SpanExtractionTask
from coda_exp.tasks.text_classification import TextClassificationTask

__all__ = ["EvidenceClassificationTask", "PairClassificationTask", "RankingTask", "Seq2SeqTask", "SpanExtractionTask",
           "TaskModule", "TextClassificationTask"]
