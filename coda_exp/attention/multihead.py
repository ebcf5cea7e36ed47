"""Multi-head attention with pluggable scoring: softmax (Vaswani et al. 2017) or CoDA (Tay et al. 2019, eq. 10).

A scoring module maps per-head q (B, H, Lq, dk), k (B, H, Lk, dk), v (B, H, Lk, dv), a bool mask broadcastable
to (B, H, Lq, Lk) (True = may attend, or None) and, when the query padding is known, a bool ``query_mask``
broadcastable to (B, H, Lq, 1) (True = real query) to ``(out (B, H, Lq, dv), AttentionMaps of (B, H, Lq, Lk) matrices or None)``:
``scoring(q, k, v, mask=None, dropout_p=0.0, return_maps=False[, query_mask=...])``. ``MultiHeadAttention`` passes
``query_mask`` only when it has one, so a scoring whose rows are independent (softmax) may ignore it; a scoring that
pools over rows (CoDA's slice centring) must keep padded queries out. A scoring with ``structured_mask = True``
(CoDA) gets the key padding mask (B, 1, 1, Lk) as ``mask`` and ``causal=True`` instead of the combined (B, 1, Lq,
Lk) mask, so Flash-CoDA never builds anything L × L.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from coda_exp.attention.attend import check_attention_inputs, dropout, run_coda_attention
from coda_exp.attention.checks import described
from coda_exp.attention.functional import run_coda
from coda_exp.attention.maps import AttentionMaps
from coda_exp.attention.masking import masked_softmax, padding_mask
from coda_exp.attention.options import DEFAULTS, MODULE_OPTION_DEFAULTS, CoDAOptions


def attention_mask(key_padding_mask: torch.Tensor | None, causal: bool, len_q: int, len_k: int,
                   device: torch.device) -> torch.Tensor | None:
    """Bool (B or 1, 1, Lq, Lk) mask, True = query i may attend key j; None when nothing is masked.

    key_padding_mask (B, Lk) True = real key. ``causal``: key j <= i + (Lk - Lq), i.e. the last query is aligned
    with the last key (plain lower-triangular mask for self-attention).
    """
    mask = None
    if key_padding_mask is not None:
        mask = key_padding_mask[:, None, None, :].to(torch.bool)  # (B, 1, 1, Lk)
    if causal:
        tri = torch.ones(len_q, len_k, dtype=torch.bool, device=device).tril(diagonal=len_k - len_q)
        mask = tri[None, None] if mask is None else mask & tri  # (B or 1, 1, Lq, Lk)
    return mask


def _with_queries(mask: torch.Tensor | None, query_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The key mask (B|1, 1, Lq|1, Lk) combined with the query mask (B, 1, Lq, 1): True = valid pair."""
    if query_mask is None:
        return mask
    return query_mask if mask is None else mask & query_mask


class SoftmaxScoring(nn.Module):
    """softmax(Q K^T / sqrt(dk)) V through ``F.scaled_dot_product_attention``.

    A query row with no valid key outputs 0 (instead of SDPA's NaN). With ``return_maps`` the explicit
    masked-softmax path runs and returns ``AttentionMaps(weights=softmax, scores=Q K^T / sqrt(dk), mask)``, the
    mask including the query mask (padded queries are no valid pairs).
    """

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                dropout_p: float = 0.0, return_maps: bool = False, query_mask: torch.Tensor | None = None):
        # each row's softmax sees only its own keys: a padded query row cannot leak into others
        if return_maps:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, Lq, Lk)
            weights = masked_softmax(scores, mask, dim=-1)  # fully-masked rows are all 0
            out = dropout(weights, dropout_p) @ v
            return out, AttentionMaps(weights=weights, scores=scores, mask=_with_queries(mask, query_mask))
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p), None
        has_key = mask.any(-1, keepdim=True)  # (B|1, 1, Lq, 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, dropout_p=dropout_p)
        return out.masked_fill(~has_key, 0.0), None


class CoDAScoring(nn.Module):
    """CoDA-Transformer eq. 10 per head: (f_E(E) * g * f_N(N)) V with E = alpha Q K^T / s, N = -beta ||q_i - k_j||_1 / s.

    The options are the fields of ``CoDAOptions`` with its defaults (s = sqrt(dk) if ``scale`` else 1, footnote 2:
    some tasks work better without it; ``gate_scale`` None = 2 for a sigmoid f_N without ``center_n`` (eq. 5, a
    gate in [0, 1]), else 1), but ``center_over`` = "row": ``center_e`` / ``center_n`` subtract the mean of E / N
    over the valid keys of each query row (eqs. 6 / 4; Table 8's rows), so a decoder position never sees the
    future through the mean; "slice" (each (batch, head) slice) leaks the future under a causal mask. Q and K feed
    both affinities (projected once). Masked pairs contribute exactly 0 and rows are NOT renormalised; dropout (if
    any) is applied to M. ``query_mask`` (broadcastable to (B, H, Lq, 1), True = real query) masks every pair of a
    padded query: its row of M and of the output is 0 and it enters no slice mean. ``return_maps``: also
    ``AttentionMaps`` (weights = M, E, N, f_E, f_N, gate, mask), computed on the materialising path.
    ``kernel_used``: the kernel the last forward ran (``dispatch``): without ``return_maps``, ``flash``
    (``attend.run_coda_attention``: M V block by block, M never stored) wherever it applies. ``causal``: key j is
    visible to query i iff j <= i + Lk - Lq, on top of ``mask`` (``structured_mask``: ``MultiHeadAttention`` passes
    the key padding mask and the flag, never a (B, 1, Lq, Lk) mask).
    """

    OPTION_DEFAULTS = MODULE_OPTION_DEFAULTS["CoDAScoring"]  # where its defaults differ from CoDAOptions()
    structured_mask = True

    def __init__(self, scale: bool = DEFAULTS.scale, center_e: bool = DEFAULTS.center_e,
                 center_n: bool = DEFAULTS.center_n, gate_scale: float | None = DEFAULTS.gate_scale,
                 alpha: float = DEFAULTS.alpha, beta: float = DEFAULTS.beta, e_fn: str = DEFAULTS.e_fn,
                 n_fn: str = DEFAULTS.n_fn, center_over: str = "row", kernel: str = DEFAULTS.kernel,
                 query_scale: bool = DEFAULTS.query_scale):
        super().__init__()
        self.options = CoDAOptions(e_fn=e_fn, n_fn=n_fn, alpha=alpha, beta=beta, scale=scale, center_e=center_e,
                                   center_n=center_n, center_over=center_over, gate_scale=gate_scale, kernel=kernel,
                                   query_scale=query_scale)
        self.kernel_used: str | None = None

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value}" for key, value in self.options.as_dict().items())

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                dropout_p: float = 0.0, return_maps: bool = False, query_mask: torch.Tensor | None = None,
                causal: bool = False):
        check_attention_inputs(q, k, v, mask=mask, query_mask=query_mask, caller="CoDAScoring")
        if not return_maps:
            out, self.kernel_used = run_coda_attention(q, k, v, self.options, mask=mask, query_mask=query_mask,
                                                       causal=causal, dropout_p=dropout_p)
            return out, None
        mask = _with_queries(mask, query_mask)  # (B|1, 1, Lq, Lk or 1)
        if causal:
            mask = _with_queries(attention_mask(None, True, q.shape[-2], k.shape[-2], q.device), mask)
        maps, self.kernel_used = run_coda(q, k, q, k, self.options, mask, maps=True)
        out = dropout(maps.weights, dropout_p) @ v  # (B, H, Lq, dv)
        return out, maps


class MultiHeadAttention(nn.Module):
    """Multi-head attention whose per-head scoring is a module (``SoftmaxScoring()`` or ``CoDAScoring(...)``).

    Q, K, V and the output are linear maps of width d_model; dk = d_model / num_heads.
    ``forward(query (B, Lq, d), key (B, Lk, d), value (B, Lk, d), key_padding_mask (B, Lk) True = real,
    causal=False, return_maps=False, query_padding_mask (B, Lq) True = real) -> out (B, Lq, d)[, maps]``, maps:
    the scoring's ``AttentionMaps`` of (B, H, Lq, Lk) matrices. Self-attention (``query is key``) takes ``query_padding_mask`` from ``key_padding_mask``
    when it is not given; cross-attention must pass it for padded queries to stay out of a CoDA slice mean.
    """

    def __init__(self, d_model: int, num_heads: int, scoring: nn.Module, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.dropout = dropout
        self.scoring = scoring
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _check_inputs(self, query, key, value) -> None:
        """query (B, Lq, d_model), key and value (B, Lk, d_model), floating: one ValueError naming what is wrong
        (not 'not enough values to unpack', or a matmul's shape error from a projection)."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not (isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[-1] == self.d_model
                    and t.is_floating_point()):
                raise ValueError(f"MultiHeadAttention: {name} must be a floating tensor (B, L, d_model="
                                 f"{self.d_model}), got {described(t)}")
        if not query.shape[0] == key.shape[0] == value.shape[0] or key.shape[1] != value.shape[1]:
            raise ValueError(f"MultiHeadAttention: query (B, Lq, d), key and value (B, Lk, d) must share B, and key "
                             f"and value Lk; got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, d_model) -> (B, H, L, dk)
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, causal: bool = False, return_maps: bool = False,
                query_padding_mask: torch.Tensor | None = None):
        self._check_inputs(query, key, value)
        batch, len_q, _ = query.shape
        padding_mask("key_padding_mask", key_padding_mask, key.shape[:2])
        padding_mask("query_padding_mask", query_padding_mask, query.shape[:2])
        if query_padding_mask is None and query is key:  # self-attention: the queries are the keys
            query_padding_mask = key_padding_mask
        q = self._heads(self.q_proj(query))  # (B, H, Lq, dk)
        k = self._heads(self.k_proj(key))  # (B, H, Lk, dk)
        v = self._heads(self.v_proj(value))  # (B, H, Lk, dk)
        extra = {}
        if getattr(self.scoring, "structured_mask", False):
            mask = attention_mask(key_padding_mask, False, len_q, key.shape[1], query.device)  # (B, 1, 1, Lk)
            extra["causal"] = causal
        else:
            mask = attention_mask(key_padding_mask, causal, len_q, key.shape[1], query.device)
        if query_padding_mask is not None:
            extra["query_mask"] = query_padding_mask[:, None, :, None].to(torch.bool)  # (B, 1, Lq, 1)
        out, maps = self.scoring(q, k, v, mask=mask, dropout_p=self.dropout if self.training else 0.0,
                                 return_maps=return_maps, **extra)
        out = self.out_proj(out.transpose(1, 2).reshape(batch, len_q, self.d_model))  # (B, Lq, d_model)
        return (out, maps) if return_maps else out
