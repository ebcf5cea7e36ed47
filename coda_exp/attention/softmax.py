"""Softmax cross-attention: the attend step of DecompAtt (Parikh et al. 2016, eqs. 1-2)."""

from __future__ import annotations

import torch
from torch import nn

from coda_exp.attention.maps import AttentionMaps
from coda_exp.attention.masking import masked_softmax, pair_mask
from coda_exp.layers import MLP


class SoftmaxCrossAttention(nn.Module):
    """e_ij = F(a_i) F(b_j)^T; beta_i = sum_j softmax_j(e_ij) b_j; alpha_j = sum_i softmax_i(e_ij) a_i.

    Interface shared by every cross-attention (CoDA included), so models take any of them:
    ``forward(a, b, mask_a, mask_b, return_maps=False) -> (a_aligned, b_aligned[, maps])`` with
    a (B, la, dim), b (B, lb, dim), masks bool (B, la)/(B, lb) True = real token; a_aligned (B, la, dim) is what
    each a_i gathers from b, b_aligned (B, lb, dim) what each b_j gathers from a. Padded rows are exactly 0.
    ``maps``: ``AttentionMaps(weights=softmax_j(e), reverse_weights=softmax_i(e), scores=e, mask)``, (B, la, lb).
    """

    def __init__(self, dim: int, hidden: int = 200, num_layers: int = 2, dropout: float = 0.2):
        super().__init__()
        self.proj = MLP(dim, hidden, num_layers=num_layers, dropout=dropout)

    def forward(self, a: torch.Tensor, b: torch.Tensor, mask_a: torch.Tensor | None = None,
                mask_b: torch.Tensor | None = None, return_maps: bool = False):
        scores = self.proj(a) @ self.proj(b).transpose(-1, -2)  # (B, la, lb)
        pm = pair_mask(mask_a, mask_b)
        attn_ab = masked_softmax(scores, pm, dim=-1)  # each a_i over b
        attn_ba = masked_softmax(scores, pm, dim=-2)  # each b_j over a
        a_aligned = attn_ab @ b  # (B, la, dim)
        b_aligned = attn_ba.transpose(-1, -2) @ a  # (B, lb, dim)
        if return_maps:
            return a_aligned, b_aligned, AttentionMaps(weights=attn_ab, reverse_weights=attn_ba, scores=scores, mask=pm)
        return a_aligned, b_aligned
