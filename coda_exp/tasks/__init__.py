"""LightningModules, one per task family; they own loss, decoding and metrics."""

from coda_exp.tasks.base import TaskModule
from coda_exp.tasks.classification import PairClassificationTask
from coda_exp.tasks.ranking import RankingTask

__all__ = ["PairClassificationTask", "RankingTask", "TaskModule"]
