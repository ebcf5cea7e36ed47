"""CoDA cross-attention: A', B' = CoDA(A, B) (Tay et al. 2019, eqs. 1-8), a drop-in for SoftmaxCrossAttention."""

from __future__ import annotations

import torch
from torch import nn

from coda_exp.attention.functional import check_coda_options, coda_components, coda_matrix, compositional_pool
from coda_exp.attention.masking import pair_mask
from coda_exp.layers import FeedForward

PROJECTIONS = ("mlp", "linear")


def _projection(kind: str, dim: int, hidden: int, dropout: float) -> nn.Module:
    """F_E / F_N of eqs. 1-2: dropout -> linear (-> ReLU for 'mlp', DecompAtt's F network with one layer)."""
    if kind == "mlp":
        return FeedForward(dim, hidden, num_layers=1, dropout=dropout)
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, hidden))


class CoDACrossAttention(nn.Module):
    """Compositional de-attention between two sequences, same interface as ``SoftmaxCrossAttention``.

    ``forward(a, b, mask_a, mask_b, return_matrices=False) -> (a_aligned, b_aligned[, matrices])``:
    a (B, la, dim), b (B, lb, dim), masks bool (B, la)/(B, lb) True = real token. E = alpha F_E(a) F_E(b)^T,
    N = -beta ||F_N(a_i) - F_N(b_j)||_1, M = f_E(E) * gate_scale * f_N(N) (eqs. 1-6, options as in
    ``coda_matrix``); a_aligned = M b (B, la, dim), b_aligned = M^T a (B, lb, dim) (eq. 7). Padded rows of both
    outputs are exactly 0. ``matrices`` = {"E_act": f_E(E), "f_N": f_N(N), "N_act": gate_scale f_N(N), "M": M},
    each (B, la, lb) (issue 3's "tanh(E), sigmoid(N), M" with the default functions: E_act, f_N, M).

    scale (default True): E and N are divided by sqrt(hidden), i.e. the effective temperatures are
    alpha/sqrt(hidden) and beta/sqrt(hidden) — eq. 10's scaling, within the paper's "alpha, beta <= 1 for large d".
    With scale=False (eqs. 1-2 with alpha = beta = 1, literally) and hidden = 200, N = -||.||_1 sums 200 terms: at
    initialisation the gate 2 sigmoid(N) is ~1e-27 on average (exactly 0 in float32 once training grows the
    projections), so no gradient reaches F_N and M only keeps pairs of identical tokens; tanh(E) saturates too.
    With scale=True the gate starts around 0.01-0.2 and tanh(E) in its linear range (docs/attention.md).

    projection: "linear" (default) or "mlp" (dropout, linear, ReLU — note that with shared projections a ReLU
    makes E >= 0, so tanh(E) could never subtract; Figure 2 of the paper shows tanh(E) of both signs); share_projections: F_N is F_E (the paper's
    "in practice, we may share parameters"). Every argument but ``dim`` is a plain value with a default so Hydra
    can build it with ``_partial_: true``.
    """

    def __init__(self, dim: int, hidden: int = 200, projection: str = "linear", share_projections: bool = True,
                 dropout: float = 0.2, alpha: float = 1.0, beta: float = 1.0, e_fn: str = "tanh",
                 n_fn: str = "sigmoid", center_e: bool = False, center_n: bool = False, gate_scale: float = 2.0,
                 scale: bool = True):
        super().__init__()
        if projection not in PROJECTIONS:
            raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
        if not isinstance(share_projections, bool):
            raise ValueError(f"share_projections must be True or False, got {share_projections!r}")  # noqa: TRY004
        check_coda_options(alpha=alpha, beta=beta, e_fn=e_fn, n_fn=n_fn, center_e=center_e, center_n=center_n,
                           gate_scale=gate_scale)
        self.proj_e = _projection(projection, dim, hidden, dropout)
        self.proj_n = self.proj_e if share_projections else _projection(projection, dim, hidden, dropout)
        if not isinstance(scale, bool):
            raise ValueError(f"scale must be True or False, got {scale!r}")  # noqa: TRY004
        self.scale = scale
        temp = hidden ** -0.5 if scale else 1.0  # 1/sqrt(d) on both affinities, as eq. 10 does per head
        self.options = {"alpha": float(alpha) * temp, "beta": float(beta) * temp, "e_fn": e_fn, "n_fn": n_fn,
                        "center_e": center_e, "center_n": center_n, "gate_scale": float(gate_scale)}

    def extra_repr(self) -> str:
        return ", ".join([f"scale={self.scale}", *(f"{key}={value}" for key, value in self.options.items())])

    def forward(self, a: torch.Tensor, b: torch.Tensor, mask_a: torch.Tensor | None = None,
                mask_b: torch.Tensor | None = None, return_matrices: bool = False):
        pm = pair_mask(mask_a, mask_b)  # (B, la, lb) or None
        e_a, e_b = self.proj_e(a), self.proj_e(b)  # (B, la, hidden), (B, lb, hidden)
        if self.proj_n is self.proj_e:
            n_a, n_b = e_a, e_b
        else:
            n_a, n_b = self.proj_n(a), self.proj_n(b)
        if not return_matrices:
            m = coda_matrix(e_a, e_b, n_a, n_b, mask=pm, **self.options)  # (B, la, lb)
            return compositional_pool(m, a, b)  # (B, la, dim), (B, lb, dim)
        comps = coda_components(e_a, e_b, n_a, n_b, mask=pm, **self.options)
        a_aligned, b_aligned = compositional_pool(comps["M"], a, b)
        return a_aligned, b_aligned, {key: comps[key] for key in ("E_act", "f_N", "N_act", "M")}
