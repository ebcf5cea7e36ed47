"""Models (plain nn.Modules); each takes its attention as a constructor argument."""

from coda_exp.models.attconv import (
    AttConvAdvanced,
    AttConvLight,
    AttConvNoConv,
    attconv_parameter_count,
    parameter_counts,
)
from coda_exp.models.decaprop import DecaProp
from coda_exp.models.decoding import beam_search, greedy_decode, strip_special
from coda_exp.models.decompatt import DecompAtt, IntraAttention
from coda_exp.models.embedding import ProjectedEmbedding
from coda_exp.models.transformer import TransformerClassifier, TransformerSeq2Seq

__all__ = [
    "AttConvAdvanced",
    "AttConvLight",
    "AttConvNoConv",
    "DecaProp",
    "DecompAtt",
    "IntraAttention",
    "ProjectedEmbedding",
    "TransformerClassifier",
    "TransformerSeq2Seq",
    "attconv_parameter_count",
    "beam_search",
    "greedy_decode",
    "parameter_counts",
    "strip_special",
]
