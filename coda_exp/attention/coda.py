"""CoDA cross-attention: A', B' = CoDA(A, B) (Tay et al. 2019, eqs. 1-8), a drop-in for SoftmaxCrossAttention."""

from __future__ import annotations

import torch
from torch import nn

from coda_exp.attention.attend import run_coda_cross_attention
from coda_exp.attention.checks import described
from coda_exp.attention.functional import compositional_pool, run_coda
from coda_exp.attention.masking import padding_mask, pair_mask
from coda_exp.attention.options import DEFAULTS, MODULE_OPTION_DEFAULTS, CoDAOptions
from coda_exp.layers import MLP

PROJECTIONS = ("mlp", "linear")


def check_module_options(hidden=200, projection: str = "linear", share_projections: bool = True,
                         dropout: float = 0.2) -> None:
    """The arguments of ``CoDACrossAttention`` that are not ``CoDAOptions`` fields (``dim`` apart: the model gives
    it): a ValueError naming the first bad one. The constructor and the pre-data config check both call it."""
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"hidden must be an int >= 1, got {hidden!r}")
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {list(PROJECTIONS)}, got {projection!r}")
    if not isinstance(share_projections, bool):
        raise ValueError(f"share_projections must be True or False, got {share_projections!r}")  # noqa: TRY004
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")


def _projection(kind: str, dim: int, hidden: int, dropout: float) -> nn.Module:
    """F_E / F_N of eqs. 1-2: dropout -> linear (-> ReLU for 'mlp', DecompAtt's F network with one layer)."""
    if kind == "mlp":
        return MLP(dim, hidden, num_layers=1, dropout=dropout)
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, hidden))


class CoDACrossAttention(nn.Module):
    """Compositional de-attention between two sequences, same interface as ``SoftmaxCrossAttention``.

    ``forward(a, b, mask_a, mask_b, return_maps=False) -> (a_aligned, b_aligned[, maps])``:
    a (B, la, dim), b (B, lb, dim), masks bool (B, la)/(B, lb) True = real token. E = alpha F_E(a) F_E(b)^T,
    N = -beta ||F_N(a_i) - F_N(b_j)||_1, M = f_E(E) * g * f_N(N) (eqs. 1-6); a_aligned = M b (B, la, dim),
    b_aligned = M^T a (B, lb, dim) (eq. 7). Padded rows of both outputs are exactly 0. ``maps``: ``AttentionMaps``
    with weights = M, E, N, f_E, f_N, gate and the pair mask, each (B, la, lb) (requesting them runs the
    materialising path). ``kernel_used``: the kernel the last forward ran (``dispatch``); without ``return_maps``,
    ``flash`` (two Flash-CoDA calls, M never stored: ``attend.run_coda_cross_attention``) wherever it applies.

    The CoDA options (alpha, beta, e_fn, n_fn, scale, center_e, center_n, center_over, gate_scale, kernel) are the
    fields of ``CoDAOptions`` with its defaults, but ``gate_scale`` = 2.0: DecompAtt's Table 2/3/8 runs fix the gate
    at 2 f_N(N) unless they say otherwise (Table 8's centred-N row sets 1.0). ``options``: the validated object.

    scale (default True): E and N are divided by sqrt(hidden), i.e. the effective temperatures are
    alpha/sqrt(hidden) and beta/sqrt(hidden) — eq. 10's scaling, within the paper's "alpha, beta <= 1 for large d".
    With scale=False (eqs. 1-2 with alpha = beta = 1, literally) and hidden = 200, N = -||.||_1 sums 200 terms: at
    initialisation the gate 2 sigmoid(N) is ~1e-27 on average (exactly 0 in float32 once training grows the
    projections), so no gradient reaches F_N and M only keeps pairs of identical tokens; tanh(E) saturates too.
    With scale=True the gate starts around 0.01-0.2 and tanh(E) in its linear range (docs/attention.md).

    projection: "linear" (default) or "mlp" (dropout, linear, ReLU — note that with shared projections a ReLU
    makes E >= 0, so tanh(E) could never subtract; Figure 2 of the paper shows tanh(E) of both signs);
    share_projections: F_N is F_E (the paper's "in practice, we may share parameters"). Every argument but ``dim``
    is a plain value with a default so Hydra can build it with ``_partial_: true``.
    """

    OPTION_DEFAULTS = MODULE_OPTION_DEFAULTS["CoDACrossAttention"]  # where its defaults differ from CoDAOptions()

    def __init__(self, dim: int, hidden: int = 200, projection: str = "linear", share_projections: bool = True,
                 dropout: float = 0.2, alpha: float = DEFAULTS.alpha, beta: float = DEFAULTS.beta,
                 e_fn: str = DEFAULTS.e_fn, n_fn: str = DEFAULTS.n_fn, center_e: bool = DEFAULTS.center_e,
                 center_n: bool = DEFAULTS.center_n, gate_scale: float | None = 2.0, scale: bool = DEFAULTS.scale,
                 center_over: str = DEFAULTS.center_over, kernel: str = DEFAULTS.kernel,
                 query_scale: bool = DEFAULTS.query_scale):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be an int >= 1, got {dim!r}")
        check_module_options(hidden, projection, share_projections, dropout)
        self.dim = dim
        self.options = CoDAOptions(e_fn=e_fn, n_fn=n_fn, alpha=alpha, beta=beta, scale=scale, center_e=center_e,
                                   center_n=center_n, center_over=center_over, gate_scale=gate_scale, kernel=kernel,
                                   query_scale=query_scale)
        self.proj_e = _projection(projection, dim, hidden, dropout)
        self.proj_n = self.proj_e if share_projections else _projection(projection, dim, hidden, dropout)
        self.kernel_used: str | None = None

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value}" for key, value in self.options.as_dict().items())

    def forward(self, a: torch.Tensor, b: torch.Tensor, mask_a: torch.Tensor | None = None,
                mask_b: torch.Tensor | None = None, return_maps: bool = False):
        for name, x in (("a", a), ("b", b)):
            if not isinstance(x, torch.Tensor) or x.dim() != 3 or not x.is_floating_point() or x.shape[-1] != self.dim:
                raise ValueError(f"CoDACrossAttention: {name} must be a floating tensor (B, L, dim={self.dim}), got "
                                 f"{described(x)}")
        if a.shape[0] != b.shape[0] or a.dtype != b.dtype:
            raise ValueError(f"CoDACrossAttention: a {a.dtype} {tuple(a.shape)} and b {b.dtype} {tuple(b.shape)} must "
                             "share the batch size and the dtype")
        padding_mask("mask_a", mask_a, a.shape[:2])
        padding_mask("mask_b", mask_b, b.shape[:2])
        mask_a = None if mask_a is None else mask_a.to(torch.bool)
        mask_b = None if mask_b is None else mask_b.to(torch.bool)
        e_a, e_b = self.proj_e(a), self.proj_e(b)  # (B, la, hidden), (B, lb, hidden)
        if self.proj_n is self.proj_e:
            n_a, n_b = e_a, e_b
        else:
            n_a, n_b = self.proj_n(a), self.proj_n(b)
        if not return_maps:  # one kernel decision: flash (M never stored) or M materialised, then eq. 7
            a_aligned, b_aligned, self.kernel_used = run_coda_cross_attention(a, b, e_a, e_b, n_a, n_b, self.options,
                                                                             mask_a, mask_b)
            return a_aligned, b_aligned
        maps, self.kernel_used = run_coda(e_a, e_b, n_a, n_b, self.options, pair_mask(mask_a, mask_b), maps=True)
        a_aligned, b_aligned = compositional_pool(maps.weights, a, b)  # (B, la, dim), (B, lb, dim)
        return a_aligned, b_aligned, maps
