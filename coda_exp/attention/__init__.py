"""Attention mechanisms: softmax and CoDA. Knows nothing of models or tasks."""

from coda_exp.attention.coda import CoDACrossAttention
from coda_exp.attention.functional import coda_components, coda_matrix, compositional_pool
from coda_exp.attention.l1 import l1_distance
from coda_exp.attention.masking import masked_max, masked_mean, masked_softmax, masked_sum, pair_mask
from coda_exp.attention.multihead import CoDAScoring, MultiHeadAttention, SoftmaxScoring, attention_mask
from coda_exp.attention.softmax import SoftmaxCrossAttention

__all__ = [
    "CoDACrossAttention",
    "CoDAScoring",
    "MultiHeadAttention",
    "SoftmaxCrossAttention",
    "SoftmaxScoring",
    "attention_mask",
    "coda_components",
    "coda_matrix",
    "compositional_pool",
    "l1_distance",
    "masked_max",
    "masked_mean",
    "masked_softmax",
    "masked_sum",
    "pair_mask",
]
