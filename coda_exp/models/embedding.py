"""Word embeddings, optionally pretrained and frozen, projected to the model's hidden size (Parikh et al. §4)."""

from __future__ import annotations

import torch
from torch import nn


class ProjectedEmbedding(nn.Module):
    """ids (B, L) -> (B, L, hidden): lookup, then a bias-free linear projection.

    ``embeddings`` (vocab, emb_dim) initialises the table; ``freeze`` ("auto" = freeze exactly when pretrained
    vectors are given, as in the paper) stops their training. Padding id 0 maps to a zero vector.
    """

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int,
                 embeddings: torch.Tensor | None = None, freeze: bool | str = "auto", padding_idx: int = 0):
        super().__init__()
        if embeddings is not None:
            if embeddings.shape[0] != vocab_size:
                raise ValueError(f"pretrained embeddings have {embeddings.shape[0]} rows but the vocabulary has "
                                 f"{vocab_size} words")
            embedding_dim = embeddings.shape[1]
        self.embed = nn.Embedding(vocab_size, embedding_dim, padding_idx=padding_idx)
        if embeddings is not None:
            with torch.no_grad():
                self.embed.weight.copy_(embeddings)
        if freeze not in (True, False, "auto"):
            raise ValueError(f"freeze must be true, false or 'auto', got {freeze!r}")
        self.embed.weight.requires_grad_(not (embeddings is not None if freeze == "auto" else freeze))
        self.proj = nn.Linear(embedding_dim, hidden_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(ids))
