"""DecaProp's building blocks (Tay et al., NeurIPS 2018; the authors' code, vanzytay/NIPS2018_DECAPROP).
"Item N" below is row N of the network table in ``docs/decaprop.md``.

Every recurrence runs on packed sequences, so padding never enters a GRU; every softmax is masked unless an option
says otherwise (``masked=False``: the authors' BAC, whose -1e-30 mask leaves padding unmasked, item 4).
Masks are boolean, True = real token, and must be left-aligned (real tokens first, then padding).

Under ``torch.compile`` (which cannot trace packing: it needs the lengths on the host) the recurrences run on the
padded rows instead, with the same results (``_run_padded``), so ``torch.compile(model, fullgraph=True)`` traces a
DecaProp model once dynamo is allowed to trace GRUs (``torch._dynamo.config.allow_rnn = True``; off by default).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from coda_exp.attention.masking import masked_softmax, pair_mask


def check_prefix_mask(mask: torch.Tensor, what: str) -> torch.Tensor:
    """(B, L) bool mask, real tokens first -> lengths (B,) long. A clear error for any other mask."""
    if mask.dtype != torch.bool:
        raise ValueError(f"{what} must be a bool mask (True = real token), got {mask.dtype}")
    lengths = mask.sum(-1)
    prefix = torch.arange(mask.shape[-1], device=mask.device) < lengths.unsqueeze(-1)
    message = (f"{what} must be left-aligned (real tokens first, then padding): packed recurrences need one length "
               "per sequence")
    if torch.compiler.is_compiling():  # no data-dependent branch in a traced graph: the check runs on the device
        torch._assert_async((prefix == mask).all(), message)
    elif not torch.equal(prefix, mask):
        raise ValueError(message)
    return lengths


class VariationalDropout(nn.Module):
    """Dropout with one mask per sequence shared over time (item 2: variational dropout on RNN inputs)."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, d) -> (B, L, d)
        if not self.training or self.p == 0.0:
            return x
        keep = x.new_empty(x.shape[0], 1, x.shape[-1]).bernoulli_(1.0 - self.p)  # (B, 1, d)
        return x * keep / (1.0 - self.p)


def _run_padded(rnn: nn.GRU, x: torch.Tensor, lengths: torch.Tensor):
    """``_run_packed``'s results from the padded rows (what torch.compile traces: no host lengths, no shapes that
    depend on the data): the forward direction over each row as it is (a real token never sees the padding after
    it), the backward one over the row reversed within its length (``torch._VF.gru``, what ``nn.GRU`` itself calls,
    with one direction's weights); padding and empty rows give zeros."""
    n, length = x.shape[:2]
    hidden = rnn.hidden_size
    pos = torch.arange(length, device=x.device)
    valid = pos < lengths[:, None]  # (N, L)
    rev = torch.where(valid, lengths[:, None] - 1 - pos, pos)  # position t of the reversed row is rev[t]
    h0 = x.new_zeros(1, n, hidden)
    weights = rnn._flat_weights  # [w_ih, w_hh, b_ih, b_hh] of the forward direction, then the backward one's
    fwd = torch._VF.gru(x, h0, weights[:4], True, 1, 0.0, rnn.training, False, True)[0]
    bwd = torch._VF.gru(x.gather(1, rev[..., None].expand_as(x)), h0, weights[4:], True, 1, 0.0, rnn.training,
                        False, True)[0]  # (N, L, h), reversed rows
    out = torch.cat([fwd, bwd.gather(1, rev[..., None].expand(n, length, hidden))], -1) * valid[..., None]
    end = (lengths - 1).clamp(min=0)[:, None, None].expand(n, 1, hidden)  # each direction's last real step
    last = torch.cat([fwd.gather(1, end)[:, 0], bwd.gather(1, end)[:, 0]], -1) * (lengths > 0)[:, None]
    return out, last


def _run_packed(rnn: nn.GRU, x: torch.Tensor, lengths: torch.Tensor):
    """Run ``rnn`` on the rows of x (N, L, d) with length > 0, packed. -> (out (N, L, 2h), h_n (N, 2h)); rows
    of length 0 (empty sequences) never run and give zeros. Under torch.compile: ``_run_padded``."""
    if torch.compiler.is_compiling():
        return _run_padded(rnn, x, lengths)
    n, length = x.shape[:2]
    hidden = rnn.hidden_size
    out = x.new_zeros(n, length, 2 * hidden)
    last = x.new_zeros(n, 2 * hidden)
    rows = (lengths > 0).nonzero(as_tuple=True)[0]
    if rows.numel() == 0:
        return out, last
    packed = pack_padded_sequence(x[rows], lengths[rows].cpu(), batch_first=True, enforce_sorted=False)
    y, h_n = rnn(packed)  # h_n (2, n', h): final forward / backward states
    y, _ = pad_packed_sequence(y, batch_first=True, total_length=length)  # (n', L, 2h), zeros after each length
    out = out.index_copy(0, rows, y)
    last = last.index_copy(0, rows, torch.cat([h_n[0], h_n[1]], dim=-1))
    return out, last


class PackedBiGRU(nn.Module):
    """Variational dropout on the input, then one bidirectional GRU on packed sequences (items 2, 6, 7).

    ``forward(x (B, L, in_dim), mask (B, L)) -> (B, L, 2 hidden)``, padded positions exactly 0.
    """

    def __init__(self, in_dim: int, hidden: int, dropout: float):
        super().__init__()
        self.drop = VariationalDropout(dropout)
        self.rnn = nn.GRU(in_dim, hidden, batch_first=True, bidirectional=True)
        self.out_dim = 2 * hidden

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return _run_packed(self.rnn, self.drop(x), mask.sum(-1))[0]


class CharEncoder(nn.Module):
    """Char BiGRU (item 1): each word's chars (char emb ``char_dim``) -> [last fwd; last bwd] (2 hidden).

    ``forward(chars (B, L, W) long, 0 = pad, real chars first) -> (B, L, 2 hidden)``; a word with no char gives 0.
    """

    def __init__(self, char_vocab_size: int, char_dim: int, hidden: int, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(char_vocab_size, char_dim, padding_idx=0)
        self.drop = VariationalDropout(dropout)
        self.rnn = nn.GRU(char_dim, hidden, batch_first=True, bidirectional=True)
        self.out_dim = 2 * hidden

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        b, length, width = chars.shape
        flat = chars.reshape(b * length, width)  # (B L, W)
        lengths = check_prefix_mask(flat != 0, "char ids (0 = pad)")
        _, last = _run_packed(self.rnn, self.drop(self.embed(flat)), lengths)  # (B L, 2h)
        return last.reshape(b, length, self.out_dim)


class ScaledBiAttention(nn.Module):
    """DecaProp's bi-attention (items 4, 5): E = ReLU(W a) ReLU(W b)^T / sqrt(hidden), W shared by both sides;
    a_aligned_i = sum_j softmax_j(E_ij) b_j, b_aligned_j = sum_i softmax_i(E_ij) a_i.

    Same interface as ``coda_exp.attention.SoftmaxCrossAttention`` / ``CoDACrossAttention``, so a CoDA module can
    replace it: ``forward(a, b, mask_a, mask_b) -> (a_aligned (B, la, dim), b_aligned (B, lb, dim))``.
    ``masked=False`` is the authors' BAC (padding takes attention weight); padded output rows are 0 either way.
    """

    def __init__(self, dim: int, hidden: int, masked: bool = True):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU())
        self.scale = 1.0 / math.sqrt(hidden)
        self.masked = masked

    def forward(self, a: torch.Tensor, b: torch.Tensor, mask_a: torch.Tensor | None = None,
                mask_b: torch.Tensor | None = None):
        scores = self.proj(a) @ self.proj(b).transpose(-1, -2) * self.scale  # (B, la, lb)
        pm = pair_mask(mask_a, mask_b)
        if self.masked:
            a_aligned = masked_softmax(scores, pm, dim=-1) @ b  # (B, la, dim)
            b_aligned = masked_softmax(scores, pm, dim=-2).transpose(-1, -2) @ a  # (B, lb, dim)
        else:
            a_aligned = torch.softmax(scores, dim=-1) @ b
            b_aligned = torch.softmax(scores, dim=-2).transpose(-1, -2) @ a
        if mask_a is not None:
            a_aligned = a_aligned * mask_a.unsqueeze(-1).to(a.dtype)
        if mask_b is not None:
            b_aligned = b_aligned * mask_b.unsqueeze(-1).to(b.dtype)
        return a_aligned, b_aligned


class FactorizationMachine(nn.Module):
    """G(x) = w0 + w^T x + 1/2 sum_f [(v_f^T x)^2 - (v_f^2)^T x^2] (item 4); w0, w start at 0, V Xavier.

    ``forward(x (..., in_dim)) -> (...)``: one scalar per token.
    """

    def __init__(self, in_dim: int, factors: int):
        super().__init__()
        if factors < 1:
            raise ValueError(f"fm_factors must be >= 1, got {factors}")
        self.w0 = nn.Parameter(torch.zeros(()))
        self.w = nn.Parameter(torch.zeros(in_dim))
        self.v = nn.Parameter(torch.empty(in_dim, factors))
        nn.init.xavier_uniform_(self.v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pairwise = (x @ self.v).pow(2) - x.pow(2) @ self.v.pow(2)  # (..., k)
        return self.w0 + x @ self.w + 0.5 * pairwise.sum(-1)


class BidirectionalAttentionConnector(nn.Module):
    """BAC (item 4, features MUL_CAT_SUB): align a and b with ``aligner``, then three FM scalars per token,
    G_cat([a; b_bar]), G_mul(a * b_bar), G_sub(a - b_bar); the FMs are shared by the two sides.

    ``forward(a (B, la, d), b (B, lb, d), mask_a, mask_b) -> (features_a (B, la, 3), features_b (B, lb, 3))``,
    padded rows 0.
    """

    def __init__(self, dim: int, factors: int, aligner: nn.Module):
        super().__init__()
        self.aligner = aligner
        self.fm_cat = FactorizationMachine(2 * dim, factors)
        self.fm_mul = FactorizationMachine(dim, factors)
        self.fm_sub = FactorizationMachine(dim, factors)

    def features(self, x: torch.Tensor, aligned: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        feats = torch.stack([self.fm_cat(torch.cat([x, aligned], -1)), self.fm_mul(x * aligned),
                             self.fm_sub(x - aligned)], dim=-1)  # (B, L, 3)
        return feats * mask.unsqueeze(-1).to(feats.dtype)

    def forward(self, a: torch.Tensor, b: torch.Tensor, mask_a: torch.Tensor, mask_b: torch.Tensor):
        b_bar, a_bar = self.aligner(a, b, mask_a, mask_b)[:2]  # (B, la, d) from b, (B, lb, d) from a
        return self.features(a, b_bar, mask_a), self.features(b, a_bar, mask_b)


class GatedSelfAttention(nn.Module):
    """R-NET gated self-attention (item 6): x_tilde = aligner(x, x) (masked softmax over ReLU projections
    / sqrt(d), or CoDA); y = [x; x_tilde] * sigmoid(W_g [x; x_tilde]). ``forward(x (B, L, d), mask) -> (B, L, 2d)``."""

    def __init__(self, dim: int, aligner: nn.Module):
        super().__init__()
        self.aligner = aligner
        self.gate = nn.Linear(2 * dim, 2 * dim, bias=False)
        self.out_dim = 2 * dim

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = torch.cat([x, self.aligner(x, x, mask, mask)[0]], dim=-1)  # (B, L, 2d)
        return y * torch.sigmoid(self.gate(y)) * mask.unsqueeze(-1).to(y.dtype)


FUSIONS = ("submult", "gated")


class Fusion(nn.Module):
    """Context-query fusion (item 5). ``submult``: ReLU(W_s [(q_tilde - p)^2; q_tilde * p] + b) -> out_dim;
    ``gated`` (R-NET, DecaProp without SM): [p; q_tilde] * sigmoid(W_g [p; q_tilde]) -> 2 dim.
    ``forward(p (B, L, d), q_tilde (B, L, d), mask) -> (B, L, self.out_dim)``, padded rows 0."""

    def __init__(self, kind: str, dim: int, out_dim: int):
        super().__init__()
        if kind not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {kind!r}")
        self.kind = kind
        self.out_dim = out_dim if kind == "submult" else 2 * dim
        self.linear = nn.Linear(2 * dim, self.out_dim, bias=kind == "submult")

    def forward(self, p: torch.Tensor, q_tilde: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.kind == "submult":
            y = torch.relu(self.linear(torch.cat([(q_tilde - p).pow(2), q_tilde * p], dim=-1)))
        else:
            x = torch.cat([p, q_tilde], dim=-1)
            y = x * torch.sigmoid(self.linear(x))
        return y * mask.unsqueeze(-1).to(y.dtype)
