"""Metrics that torchmetrics/sacrebleu do not already provide (or get wrong)."""

from coda_exp.metrics.accuracy import IndexedAccuracy
from coda_exp.metrics.bleu import multi_bleu, sacrebleu_score, t2t_bleu, tokenized_bleu
from coda_exp.metrics.mean import IndexedMean
from coda_exp.metrics.ranking import GroupedRanking, ranking_scores

__all__ = ["GroupedRanking", "IndexedAccuracy", "IndexedMean", "multi_bleu", "ranking_scores", "sacrebleu_score", "t2t_bleu",
           "tokenized_bleu"]
