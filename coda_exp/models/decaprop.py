"""DecaProp (Tay et al., NeurIPS 2018), CoDA Table 1's base reader; the context-query attention is injected.

Structure (the paper and the authors' code, vanzytay/NIPS2018_DECAPROP; items as in ``docs/decaprop.md``; blocks in
``decaprop_layers``):

1. input      x = [word (frozen GloVe); char BiGRU (option); exact match (option)]               (B, L, d_in)
2. DecaEnc    P_k, Q_k = BiGRU_k(P_{k-1}), k = 1..encoder_layers, shared by P and Q, packed     (B, L, 2h) each
3. dense BAC  for every (i, j): BAC(P_i, Q_j) -> 3 FM scalars per token per side                (B, L, 3 n^2)
              P = [P_1; ...; P_n; scalars], Q likewise                                            (B, L, D = 2hn + 3n^2)
4. BAC        projected bi-attention, G([a; b_bar]), G(a * b_bar), G(a - b_bar), G an FM (k = fm_factors)
5. CQ attn    q_tilde_i = sum_j softmax_j(E_ij) q_j, E = ReLU(W p) ReLU(W q)^T / sqrt(h)   <- CoDA replaces this:
              q_tilde_i = sum_j M_ij q_j; then fusion SubMult ReLU(W[(q_tilde - p)^2; q_tilde * p] + b) or gated
6. core       BiGRU -> R-NET gated self-attention -> BiGRU                                        (B, Lp, 2h)
7. pointer    S = BiGRU(match), E = BiGRU(S); start = w_s S, end = w_e E, masked outside the passage  (B, Lp)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from coda_exp.models.decaprop_layers import (
    BidirectionalAttentionConnector,
    CharEncoder,
    Fusion,
    GatedSelfAttention,
    PackedBiGRU,
    ScaledBiAttention,
    check_prefix_mask,
)

MASK_VALUE = -1e30  # logits outside the passage: large, negative and finite (softmax / cross-entropy stay finite)


def _mask_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    fill = max(MASK_VALUE, torch.finfo(logits.dtype).min)  # float16 cannot hold -1e30
    return logits.masked_fill(~mask, fill)


def _pad_to(x: torch.Tensor, length: int) -> torch.Tensor:
    """(B, L, ...) -> (B, length, ...) with zeros (or False) after position L."""
    if x.shape[1] == length:
        return x
    pad = x.new_zeros((x.shape[0], length - x.shape[1]) + tuple(x.shape[2:]))
    return torch.cat([x, pad], dim=1)


class DecaProp(nn.Module):
    """``forward(p_ids, p_mask, q_ids, q_mask, p_chars=None, q_chars=None, p_em=None, q_em=None)
    -> (start_logits (B, Lp), end_logits (B, Lp))``, -1e30 outside the passage (items 1-7, module docstring).

    ``attention``: None = the paper's softmax context-query attention (item 5), or a cross-attention factory called
    as ``attention(dim=...)`` (Hydra ``_partial_``; ``model/attention=coda`` -> ``CoDACrossAttention``) with the
    interface of ``coda_exp.attention.SoftmaxCrossAttention``; only its first output, what each passage token gathers
    from the query, is used. ``coda_in_bac`` / ``coda_in_self_attention``: the same factory also builds every BAC's
    bi-attention (item 4) / the core's self-attention (item 6); both need ``attention``.

    Options (defaults = the authors' code, items 1-7): ``hidden_size`` 64 units per GRU direction and the width of the
    attention projections; ``encoder_layers`` 3; ``dropout`` 0.2 (keep 0.8), variational, on every GRU input;
    ``fm_factors`` 32; ``bac_masking`` True (False = the code's effectively unmasked BAC softmax: padding then takes
    attention weight, so outputs depend on padding); ``fusion`` submult | gated; ``use_char`` (char BiGRU, ``char_dim``
    20, ``char_hidden`` units per direction, default ``hidden_size``); ``use_exact_match`` (one 0/1 channel).
    Word vectors: ``embeddings`` (vocab, dim) initialises the table (its width wins over ``embedding_dim``);
    ``freeze_embeddings`` True | False | "auto" (frozen exactly when ``embeddings`` is given).
    Masks: bool, True = real token, left-aligned; padding never enters a GRU (packed), a softmax or a logit.
    """

    def __init__(self, vocab_size: int, attention: Callable[..., nn.Module] | None = None,
                 embeddings: torch.Tensor | None = None, pad_id: int = 0, char_vocab_size: int | None = None,
                 coda_in_bac: bool = False, coda_in_self_attention: bool = False, embedding_dim: int = 300,
                 freeze_embeddings: bool | str = "auto", hidden_size: int = 64, encoder_layers: int = 3,
                 dropout: float = 0.2, fm_factors: int = 32, bac_masking: bool = True, fusion: str = "submult",
                 use_char: bool = False, char_dim: int = 20, char_hidden: int | None = None,
                 use_exact_match: bool = False):
        super().__init__()
        if attention is None and (coda_in_bac or coda_in_self_attention):
            raise ValueError("model.coda_in_bac / model.coda_in_self_attention reuse the injected attention: set "
                             "model/attention=coda (model=decaprop_coda), or leave them false")
        if encoder_layers < 1:
            raise ValueError(f"encoder_layers must be >= 1, got {encoder_layers}")
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        if use_char and not char_vocab_size:
            raise ValueError("use_char=true needs char_vocab_size from the data module (it gave none)")
        if freeze_embeddings not in (True, False, "auto"):
            raise ValueError(f"freeze_embeddings must be true, false or 'auto', got {freeze_embeddings!r}")
        if embeddings is not None:
            if embeddings.shape[0] != vocab_size:
                raise ValueError(f"pretrained embeddings have {embeddings.shape[0]} rows but the vocabulary has "
                                 f"{vocab_size} words")
            embedding_dim = embeddings.shape[1]
        self.use_char, self.use_exact_match = use_char, use_exact_match

        # 1. input
        self.embed = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
        if embeddings is not None:
            with torch.no_grad():
                self.embed.weight.copy_(embeddings)
        frozen = embeddings is not None if freeze_embeddings == "auto" else freeze_embeddings
        self.embed.weight.requires_grad_(not frozen)
        self.chars = (CharEncoder(char_vocab_size, char_dim, char_hidden or hidden_size, dropout)
                      if use_char else None)
        in_dim = embedding_dim + (self.chars.out_dim if use_char else 0) + int(use_exact_match)

        # 2. DecaEnc: one stack shared by passage and query
        width = 2 * hidden_size
        self.encoder = nn.ModuleList(PackedBiGRU(in_dim if k == 0 else width, hidden_size, dropout)
                                     for k in range(encoder_layers))

        # 3-4. a BAC for every pair (i, j) of encoder layers
        def bac_aligner() -> nn.Module:
            return attention(dim=width) if coda_in_bac else ScaledBiAttention(width, hidden_size, bac_masking)

        self.bacs = nn.ModuleList(BidirectionalAttentionConnector(width, fm_factors, bac_aligner())
                                  for _ in range(encoder_layers ** 2))
        dim = encoder_layers * width + 3 * encoder_layers ** 2  # D: 6h + 27 at the defaults

        # 5. context-query attention (CoDA's place) and fusion
        self.cq_attention = attention(dim=dim) if attention is not None else ScaledBiAttention(dim, hidden_size)
        self.fusion = Fusion(fusion, dim, width)

        # 6. core: BiGRU -> gated self-attention -> BiGRU
        self.core_in = PackedBiGRU(self.fusion.out_dim, hidden_size, dropout)
        self_aligner = attention(dim=width) if coda_in_self_attention else ScaledBiAttention(width, hidden_size)
        self.self_attention = GatedSelfAttention(width, self_aligner)
        self.core_out = PackedBiGRU(self.self_attention.out_dim, hidden_size, dropout)

        # 7. answer pointer
        self.start_rnn = PackedBiGRU(width, hidden_size, dropout)
        self.end_rnn = PackedBiGRU(width, hidden_size, dropout)
        self.start_out = nn.Linear(width, 1, bias=False)  # a bias is shift-invariant under softmax
        self.end_out = nn.Linear(width, 1, bias=False)

    def inputs(self, ids: torch.Tensor, chars: torch.Tensor | None, em: torch.Tensor | None,
               side: str) -> torch.Tensor:
        """Item 1: ids (B, L) -> [word; char BiGRU; exact match] (B, L, d_in)."""
        parts = [self.embed(ids)]
        if self.use_char:
            if chars is None:
                raise ValueError(f"use_char=true needs {side}_chars (B, L, W) char ids")
            if chars.shape[:2] != ids.shape:
                raise ValueError(f"{side}_chars {tuple(chars.shape)} does not match {side}_ids {tuple(ids.shape)}")
            parts.append(self.chars(chars))
        if self.use_exact_match:
            if em is None:
                raise ValueError(f"use_exact_match=true needs {side}_em (B, L) exact-match flags")
            if em.shape != ids.shape:
                raise ValueError(f"{side}_em {tuple(em.shape)} does not match {side}_ids {tuple(ids.shape)}")
            parts.append(em.unsqueeze(-1).to(parts[0].dtype))
        return torch.cat(parts, dim=-1)

    def encode(self, p: torch.Tensor, p_mask: torch.Tensor, q: torch.Tensor, q_mask: torch.Tensor):
        """Items 2-4: DecaEnc + dense BACs -> P (B, Lp, D), Q (B, Lq, D). The shared encoder runs passage and query
        as one packed batch (2B sequences); packing makes the extra padding free and keeps it out of every GRU."""
        b, lp, lq = p.shape[0], p.shape[1], q.shape[1]
        length = max(lp, lq)
        x = torch.cat([_pad_to(p, length), _pad_to(q, length)], dim=0)  # (2B, L, d_in)
        mask = torch.cat([_pad_to(p_mask, length), _pad_to(q_mask, length)], dim=0)  # (2B, L)
        p_layers, q_layers = [], []
        for rnn in self.encoder:
            x = rnn(x, mask)  # (2B, L, 2h)
            p_layers.append(x[:b, :lp])
            q_layers.append(x[b:, :lq])
        p_feats, q_feats = [], []
        n = len(self.encoder)
        for idx, bac in enumerate(self.bacs):
            fp, fq = bac(p_layers[idx // n], q_layers[idx % n], p_mask, q_mask)  # (B, Lp, 3), (B, Lq, 3)
            p_feats.append(fp)
            q_feats.append(fq)
        return torch.cat(p_layers + p_feats, dim=-1), torch.cat(q_layers + q_feats, dim=-1)

    def forward(self, p_ids: torch.Tensor, p_mask: torch.Tensor, q_ids: torch.Tensor, q_mask: torch.Tensor,
                p_chars: torch.Tensor | None = None, q_chars: torch.Tensor | None = None,
                p_em: torch.Tensor | None = None, q_em: torch.Tensor | None = None):
        check_prefix_mask(p_mask, "p_mask")
        check_prefix_mask(q_mask, "q_mask")
        if p_ids.shape != p_mask.shape or q_ids.shape != q_mask.shape:
            raise ValueError(f"ids and masks differ in shape: p {tuple(p_ids.shape)} vs {tuple(p_mask.shape)}, "
                             f"q {tuple(q_ids.shape)} vs {tuple(q_mask.shape)}")
        p = self.inputs(p_ids, p_chars, p_em, "p")  # (B, Lp, d_in)
        q = self.inputs(q_ids, q_chars, q_em, "q")  # (B, Lq, d_in)
        p, q = self.encode(p, p_mask, q, q_mask)  # (B, Lp, D), (B, Lq, D)
        q_tilde = self.cq_attention(p, q, p_mask, q_mask)[0]  # (B, Lp, D): softmax or CoDA pooling of Q
        match = self.fusion(p, q_tilde, p_mask)  # (B, Lp, 2h) submult | (B, Lp, 2D) gated
        core = self.core_out(self.self_attention(self.core_in(match, p_mask), p_mask), p_mask)  # (B, Lp, 2h)
        start = self.start_rnn(core, p_mask)  # (B, Lp, 2h)
        end = self.end_rnn(start, p_mask)  # (B, Lp, 2h)
        return (_mask_logits(self.start_out(start).squeeze(-1), p_mask),
                _mask_logits(self.end_out(end).squeeze(-1), p_mask))
