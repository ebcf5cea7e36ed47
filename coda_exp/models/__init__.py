"""Models (plain nn.Modules); each takes its attention as a constructor argument."""

from coda_exp.models.decoding import beam_search, greedy_decode, strip_special
from coda_exp.models.decompatt import DecompAtt, IntraAttention
from coda_exp.models.embedding import ProjectedEmbedding
from coda_exp.models.transformer import TransformerClassifier, TransformerSeq2Seq

__all__ = [
    "DecompAtt",
    "IntraAttention",
    "ProjectedEmbedding",
    "TransformerClassifier",
    "TransformerSeq2Seq",
    "beam_search",
    "greedy_decode",
    "strip_special",
]
