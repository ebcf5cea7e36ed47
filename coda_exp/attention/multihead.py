"""Multi-head attention with pluggable scoring: softmax (Vaswani et al. 2017) or CoDA (Tay et al. 2019, eq. 10).

A scoring module maps per-head q (B, H, Lq, dk), k (B, H, Lk, dk), v (B, H, Lk, dv), a bool mask broadcastable
to (B, H, Lq, Lk) (True = may attend, or None) and, when the query padding is known, a bool ``query_mask``
broadcastable to (B, H, Lq, 1) (True = real query) to ``(out (B, H, Lq, dv), weights (B, H, Lq, Lk) or None)``:
``scoring(q, k, v, mask=None, dropout_p=0.0, need_weights=False[, query_mask=...])``. ``MultiHeadAttention`` passes
``query_mask`` only when it has one, so a scoring whose rows are independent (softmax) may ignore it; a scoring that
pools over rows (CoDA's slice centring) must keep padded queries out.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from coda_exp.attention.functional import check_coda_options, coda_matrix
from coda_exp.attention.masking import masked_softmax


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


class SoftmaxScoring(nn.Module):
    """softmax(Q K^T / sqrt(dk)) V through ``F.scaled_dot_product_attention``.

    A query row with no valid key outputs 0 (instead of SDPA's NaN); with ``need_weights`` the explicit
    masked-softmax path is used so the weights can be returned.
    """

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                dropout_p: float = 0.0, need_weights: bool = False, query_mask: torch.Tensor | None = None):
        del query_mask  # each row's softmax sees only its own keys: a padded query row cannot leak into others
        if need_weights:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, Lq, Lk)
            weights = masked_softmax(scores, mask, dim=-1)  # fully-masked rows are all 0
            return F.dropout(weights, dropout_p, training=dropout_p > 0) @ v, weights
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p), None
        has_key = mask.any(-1, keepdim=True)  # (B|1, 1, Lq, 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key, dropout_p=dropout_p)
        return out.masked_fill(~has_key, 0.0), None


class CoDAScoring(nn.Module):
    """CoDA-Transformer eq. 10 per head: (f_E(E) * g * f_N(N)) V with E = alpha Q K^T / s, N = -beta ||q_i - k_j||_1 / s.

    s = sqrt(dk) if ``scale`` else 1 (footnote 2: some tasks work better without it). ``center_e`` / ``center_n``
    subtract the mean of E / N over the valid pairs (eqs. 6 / 4; Table 8's rows), of each query row
    (center_over="row", default: causal-safe, a decoder position never sees the future through the mean) or of
    each (batch, head) slice (center_over="slice"; leaks the future under a causal mask). ``gate_scale`` g:
    None = 2 without ``center_n`` (eq. 5, a sigmoid gate in [0, 1]) and 1 with it. Q and K feed both affinities
    (projected once). Masked pairs contribute exactly 0 and rows are NOT renormalised; dropout (if any) is
    applied to M. ``query_mask`` (broadcastable to (B, H, Lq, 1), True = real query) masks every pair of a padded
    query: its row of M and of the output is 0 and it enters no slice mean.
    """

    def __init__(self, scale: bool = True, center_e: bool = False, center_n: bool = False,
                 gate_scale: float | None = None, alpha: float = 1.0, beta: float = 1.0, e_fn: str = "tanh",
                 n_fn: str = "sigmoid", center_over: str = "row", l1_backend: str | None = None):
        super().__init__()
        for name, value in (("scale", scale), ("center_e", center_e), ("center_n", center_n)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be True or False, got {value!r}")  # noqa: TRY004 (option value)
        if gate_scale is None:
            gate_scale = 1.0 if center_n else 2.0
        self.scale, self.l1_backend = scale, l1_backend
        self.options = {"alpha": float(alpha), "beta": float(beta), "e_fn": e_fn, "n_fn": n_fn,
                        "center_e": center_e, "center_n": center_n, "gate_scale": float(gate_scale),
                        "center_over": center_over}
        check_coda_options(**self.options)

    def extra_repr(self) -> str:
        return f"scale={self.scale}, " + ", ".join(f"{key}={value}" for key, value in self.options.items())

    def matrix_options(self, q: torch.Tensor, mask: torch.Tensor | None,
                       query_mask: torch.Tensor | None) -> tuple[torch.Tensor | None, dict]:
        """(pair mask, keyword options) of the ``coda_matrix`` call for queries ``q`` (B, H, Lq, dk): the key
        mask combined with the query mask, the temperatures divided by sqrt(dk) when ``scale``."""
        if query_mask is not None:
            mask = query_mask if mask is None else mask & query_mask  # (B|1, 1, Lq, Lk or 1)
        opts = dict(self.options, l1_backend=self.l1_backend)
        if self.scale:
            inv = 1.0 / math.sqrt(q.shape[-1])
            opts["alpha"], opts["beta"] = opts["alpha"] * inv, opts["beta"] * inv
        return mask, opts

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                dropout_p: float = 0.0, need_weights: bool = False, query_mask: torch.Tensor | None = None):
        mask, opts = self.matrix_options(q, mask, query_mask)
        m = coda_matrix(q, k, q, k, mask=mask, **opts)  # (B, H, Lq, Lk)
        out = F.dropout(m, dropout_p, training=dropout_p > 0) @ v  # (B, H, Lq, dv)
        return out, (m if need_weights else None)


class MultiHeadAttention(nn.Module):
    """Multi-head attention whose per-head scoring is a module (``SoftmaxScoring()`` or ``CoDAScoring(...)``).

    Q, K, V and the output are linear maps of width d_model; dk = d_model / num_heads.
    ``forward(query (B, Lq, d), key (B, Lk, d), value (B, Lk, d), key_padding_mask (B, Lk) True = real,
    causal=False, return_weights=False, query_padding_mask (B, Lq) True = real) -> out (B, Lq, d)[, weights
    (B, H, Lq, Lk)]``. Self-attention (``query is key``) takes ``query_padding_mask`` from ``key_padding_mask``
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

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, d_model) -> (B, H, L, dk)
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, causal: bool = False, return_weights: bool = False,
                query_padding_mask: torch.Tensor | None = None):
        batch, len_q, _ = query.shape
        if query_padding_mask is None and query is key:  # self-attention: the queries are the keys
            query_padding_mask = key_padding_mask
        q = self._heads(self.q_proj(query))  # (B, H, Lq, dk)
        k = self._heads(self.k_proj(key))  # (B, H, Lk, dk)
        v = self._heads(self.v_proj(value))  # (B, H, Lk, dk)
        mask = attention_mask(key_padding_mask, causal, len_q, key.shape[1], query.device)
        extra = {}
        if query_padding_mask is not None:
            extra["query_mask"] = query_padding_mask[:, None, :, None].to(torch.bool)  # (B, 1, Lq, 1)
        out, weights = self.scoring(q, k, v, mask=mask, dropout_p=self.dropout if self.training else 0.0,
                                    need_weights=return_weights, **extra)
        out = self.out_proj(out.transpose(1, 2).reshape(batch, len_q, self.d_model))  # (B, Lq, d_model)
        return (out, weights) if return_weights else out
