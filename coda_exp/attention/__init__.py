"""Attention mechanisms: softmax and CoDA. Knows nothing of models or tasks."""

from coda_exp.attention.masking import masked_max, masked_mean, masked_softmax, masked_sum, pair_mask
from coda_exp.attention.softmax import SoftmaxCrossAttention

__all__ = [
    "SoftmaxCrossAttention",
    "masked_max",
    "masked_mean",
    "masked_softmax",
    "masked_sum",
    "pair_mask",
]
