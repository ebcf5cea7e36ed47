"""Decomposable attention (Parikh et al. 2016): attend, compare, aggregate — attention passed in, not chosen here."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coda_exp.attention.maps import AttentionMaps
from coda_exp.attention.masking import masked_softmax, masked_sum, pair_mask
from coda_exp.layers import MLP
from coda_exp.models.embedding import ProjectedEmbedding


class IntraAttention(nn.Module):
    """Intra-sentence attention (Parikh et al. §2.4): f_ij = F_intra(a_i)·F_intra(a_j) + d(i−j); a_i ← [a_i; a'_i].

    d is a learned bias per distance bucket, distances ≥ ``max_distance`` sharing one bucket.
    """

    def __init__(self, dim: int, hidden: int, dropout: float, max_distance: int = 10):
        super().__init__()
        self.proj = MLP(dim, hidden, dropout=dropout)
        self.max_distance = max_distance
        self.distance_bias = nn.Embedding(max_distance + 1, 1)
        nn.init.zeros_(self.distance_bias.weight)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # (B, L, d) -> (B, L, 2d)
        f = self.proj(x)
        pos = torch.arange(x.shape[1], device=x.device)
        dist = (pos[None, :] - pos[:, None]).abs().clamp(max=self.max_distance)  # (L, L)
        scores = f @ f.transpose(-1, -2) + self.distance_bias(dist).squeeze(-1)  # (B, L, L)
        attn = masked_softmax(scores, pair_mask(mask, mask), dim=-1)
        return torch.cat([x, attn @ x], dim=-1)


class DecompAtt(nn.Module):
    """``forward(a_ids, a_mask, b_ids, b_mask) -> logits (B, num_classes)``.

    attend:    (a', b') = attention(a, b)               softmax (eq. 1-2) or CoDA (CoDA paper eq. 7-8)
    compare:   v1_i = G([a_i; a'_i]),  v2_j = G([b_j; b'_j])                           (eq. 3)
    aggregate: y = H([Σ_i v1_i; Σ_j v2_j]) -> linear -> logits, sums over real tokens only  (eq. 4-5)

    ``attention`` is a factory called as ``attention(dim=...)`` (a Hydra ``_partial_`` or any callable) returning
    a cross-attention module with the interface of :class:`coda_exp.attention.SoftmaxCrossAttention`.
    """

    def __init__(self, vocab_size: int, num_classes: int, attention: Callable[..., nn.Module],
                 hidden_size: int = 200, embedding_dim: int = 300, dropout: float = 0.2,
                 intra_attention: bool = False, intra_max_distance: int = 10,
                 embeddings: torch.Tensor | None = None, freeze_embeddings: bool | str = "auto"):
        super().__init__()
        self.embed = ProjectedEmbedding(vocab_size, embedding_dim, hidden_size, embeddings, freeze_embeddings)
        self.intra = IntraAttention(hidden_size, hidden_size, dropout, intra_max_distance) if intra_attention else None
        dim = 2 * hidden_size if intra_attention else hidden_size
        self.attention = attention(dim=dim)
        self.compare = MLP(2 * dim, hidden_size, dropout=dropout)
        self.aggregate = MLP(2 * hidden_size, hidden_size, dropout=dropout)
        self.classifier = nn.Linear(hidden_size, num_classes)

    def encode(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        return self.intra(x, mask) if self.intra is not None else x

    def attention_maps(self, a_ids: torch.Tensor, a_mask: torch.Tensor, b_ids: torch.Tensor,
                       b_mask: torch.Tensor) -> AttentionMaps:
        """The attend step's ``AttentionMaps`` (softmax or CoDA: weights, f_E, f_N, gate, ...), each (B, la, lb),
        its ``mask`` the real token pairs."""
        a, b = self.encode(a_ids, a_mask), self.encode(b_ids, b_mask)
        *_, maps = self.attention(a, b, a_mask, b_mask, return_maps=True)
        return maps

    def forward(self, a_ids: torch.Tensor, a_mask: torch.Tensor, b_ids: torch.Tensor,
                b_mask: torch.Tensor) -> torch.Tensor:
        a, b = self.encode(a_ids, a_mask), self.encode(b_ids, b_mask)  # (B, la, d), (B, lb, d)
        a_aligned, b_aligned = self.attention(a, b, a_mask, b_mask)
        v1 = masked_sum(self.compare(torch.cat([a, a_aligned], -1)), a_mask)  # (B, hidden)
        v2 = masked_sum(self.compare(torch.cat([b, b_aligned], -1)), b_mask)
        return self.classifier(self.aggregate(torch.cat([v1, v2], -1)))
