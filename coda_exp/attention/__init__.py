"""Attention mechanisms: softmax and CoDA. Knows nothing of models or tasks.

CoDA's options: ``CoDAOptions``; which kernel runs: ``dispatch.select_kernel``, once per call (``CODA_KERNEL`` overrides the
configured ``kernel``); what a forward ran: ``kernels_used(model)``; matrices for analysis: ``AttentionMaps``.
"""

from coda_exp.attention.attend import coda_attention, run_coda_attention
from coda_exp.attention.coda import CoDACrossAttention
from coda_exp.attention.dispatch import ENV_VAR as KERNEL_ENV_VAR
from coda_exp.attention.dispatch import KERNEL_CHOICES, kernels_used, l1_distance, select_kernel
from coda_exp.attention.flash_spec import valid_pairs
from coda_exp.attention.functional import coda_components, coda_matrix, compositional_pool
from coda_exp.attention.maps import AttentionMaps
from coda_exp.attention.masking import masked_max, masked_mean, masked_softmax, masked_sum, pair_mask
from coda_exp.attention.multihead import CoDAScoring, MultiHeadAttention, SoftmaxScoring, attention_mask
from coda_exp.attention.options import CoDAOptions, option_defaults
from coda_exp.attention.softmax import SoftmaxCrossAttention

__all__ = [
    "KERNEL_CHOICES",
    "KERNEL_ENV_VAR",
    "AttentionMaps",
    "CoDACrossAttention",
    "CoDAOptions",
    "CoDAScoring",
    "MultiHeadAttention",
    "SoftmaxCrossAttention",
    "SoftmaxScoring",
    "attention_mask",
    "coda_attention",
    "coda_components",
    "coda_matrix",
    "compositional_pool",
    "kernels_used",
    "l1_distance",
    "masked_max",
    "masked_mean",
    "masked_softmax",
    "masked_sum",
    "option_defaults",
    "pair_mask",
    "run_coda_attention",
    "select_kernel",
    "valid_pairs",
]
