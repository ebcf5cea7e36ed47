"""Models (plain nn.Modules); each takes its attention as a constructor argument."""

from coda_exp.models.decompatt import DecompAtt, IntraAttention
from coda_exp.models.embedding import ProjectedEmbedding

__all__ = ["DecompAtt", "IntraAttention", "ProjectedEmbedding"]
