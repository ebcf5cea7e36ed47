"""Metrics that torchmetrics/sacrebleu do not already provide (or get wrong)."""

from coda_exp.metrics.ranking import GroupedRanking, ranking_scores

__all__ = ["GroupedRanking", "ranking_scores"]
