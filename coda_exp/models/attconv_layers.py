"""The attentive convolution layers of AttConv (Yin & Schütze, TACL 2018, §3): matching, attentive context, light,
advanced and "w/o convolution" layers. Plain nn.Modules; the model around them is ``coda_exp.models.attconv``.

Every layer is called as ``layer(hx (B, Lx, d), mx (B, Lx), hy (B, Ly, d), my (B, Ly)) -> (B, Lx, hidden)`` with
bool masks True = real token; the inputs' padded positions are zero (the model zeroes them), and so are the
output's, so a padded position never enters a width-3 window, an attention or the max-pool.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn

from coda_exp.attention.masking import masked_softmax, pair_mask

# -- matching (eqs. 1-3) -------------------------------------------------------------------------------------------


class DotMatching(nn.Module):
    """e_ij = h^x_i · h^y_j (eq. 1): no parameters. ``query(x)`` is the left factor: e = query(x) y^T."""

    factorable = True  # e_ij is a product query(h^x_i) · h^y_j, which an injected cross-attention can score

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def query(self, x: torch.Tensor) -> torch.Tensor:  # (B, Lx, d) -> (B, Lx, d)
        return x

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (B, Lx, d), (B, Ly, d) -> (B, Lx, Ly)
        return self.query(x) @ y.transpose(-1, -2)


class BilinearMatching(DotMatching):
    """e_ij = (h^x_i)^T W_e h^y_j (eq. 2), W_e ∈ R^{d×d}: the dot product of query(h^x_i) = h^x_i W_e with h^y_j."""

    def __init__(self, dim: int):
        super().__init__(dim)
        self.weight = nn.Parameter(torch.empty(dim, dim))
        nn.init.xavier_uniform_(self.weight)

    def query(self, x: torch.Tensor) -> torch.Tensor:  # (B, Lx, d) -> (B, Lx, d)
        return x @ self.weight


class AdditiveMatching(nn.Module):
    """e_ij = v_e^T tanh(W_e h^x_i + U_e h^y_j) (eq. 3), W_e, U_e ∈ R^{d×d}, v_e ∈ R^d (no bias, as printed).

    Not a product of a left and a right factor, so only the paper's softmax can normalise it (see AttentiveContext).
    """

    factorable = False

    def __init__(self, dim: int):
        super().__init__()
        self.w = nn.Linear(dim, dim, bias=False)
        self.u = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, 1, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (B, Lx, d), (B, Ly, d) -> (B, Lx, Ly)
        hidden = torch.tanh(self.w(x).unsqueeze(2) + self.u(y).unsqueeze(1))  # (B, Lx, Ly, d)
        return self.v(hidden).squeeze(-1)


MATCHINGS = {"dot": DotMatching, "bilinear": BilinearMatching, "additive": AdditiveMatching}


def injected_attention_problem(matching: str) -> str | None:
    """Why ``matching`` cannot take an injected attention (None when it can, or is not a matching): the one message
    the model raises and ``run_checks`` gives before any data loads."""
    if matching not in MATCHINGS or MATCHINGS[matching].factorable:
        return None
    return (f"model.matching={matching} needs the paper's softmax (model.attention: null): an injected attention "
            "(model/attention=...) scores products query(h^x_i) · h^y_j, and additive matching (AttConv eq. 3) is "
            "not one; use matching dot or bilinear")


class AttentiveContext(nn.Module):
    """c^x_i = Σ_j w_ij f_j (eq. 4): the context each source position i gathers from the focus positions j.

    ``attention`` None: w = softmax_j(e_i) over the real j only, e the matching (eqs. 1-3): the paper. Otherwise a
    factory ``attention(dim=...)`` (Hydra ``_partial_``) of a cross-attention with the interface of
    ``coda_exp.attention.SoftmaxCrossAttention`` (``model/attention=coda``: CoDA's M = f_E(E) * g * f_N(N)
    replaces the softmax): it is called on (query(h^x), h^y), so its E is its own dot product of the matching's
    left factor with h^y (for CoDA, E = alpha F_E(query(h^x_i)) · F_E(h^y_j), N from the same F), and c^x is its
    ``a_aligned`` = w h^y. Dot and bilinear matching factor that way; additive matching (eq. 3) does not and is
    refused with an injected attention.
    """

    def __init__(self, dim: int, matching: str = "dot", attention: Callable[..., nn.Module] | None = None):
        super().__init__()
        if matching not in MATCHINGS:
            raise ValueError(f"model.matching must be one of {sorted(MATCHINGS)}, got {matching!r}")
        self.matching = MATCHINGS[matching](dim)
        if attention is not None and injected_attention_problem(matching):
            raise ValueError(injected_attention_problem(matching))
        self.attention = attention(dim=dim) if attention is not None else None

    def forward(self, src: torch.Tensor, focus: torch.Tensor, mask_src: torch.Tensor,
                mask_focus: torch.Tensor) -> torch.Tensor:  # (B, Lx, D), (B, Ly, D) -> (B, Lx, D)
        if self.attention is None:
            weights = masked_softmax(self.matching(src, focus), pair_mask(mask_src, mask_focus), dim=-1)  # (B, Lx, Ly)
            return weights @ focus  # an empty context (no real j) gives c^x_i = 0
        return self.attention(self.matching.query(src), focus, mask_src, mask_focus)[0]


# -- convolutions --------------------------------------------------------------------------------------------------


def conv_over(conv: nn.Conv1d, h: torch.Tensor) -> torch.Tensor:
    """A Conv1d over the length of h (B, L, d_in) -> (B, L, d_out); zero padding at the ends (h is zero at pads)."""
    return conv(h.transpose(1, 2)).transpose(1, 2)


def keep(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """h (B, L, d) with the padded positions (mask (B, L) False) set to 0."""
    return h * mask.unsqueeze(-1).to(h.dtype)


class AttentiveConvolution(nn.Module):
    """h_new,i = tanh(W¹ [b_{i-1}, b_i, b_{i+1}] + W² c_i + b) (eqs. 5-6): a width-3 convolution over the
    beneficiary B plus a width-1 convolution (no bias) over the contexts C, summed before the tanh.
    At d = hidden = 300: W¹ 270,000 + W² 90,000 (+ b 300) = Table 7's "light (360K)"."""

    def __init__(self, dim: int, context_dim: int, hidden: int, width: int = 3):
        super().__init__()
        self.conv = nn.Conv1d(dim, hidden, width, padding=width // 2)  # W¹ and b
        self.context = nn.Linear(context_dim, hidden, bias=False)  # W²

    def forward(self, bene: torch.Tensor, ctx: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # bene (B, Lx, d) zero at pads, ctx (B, Lx, D) -> (B, Lx, hidden), zero at pads
        return keep(torch.tanh(conv_over(self.conv, bene) + self.context(ctx)), mask)


class GatedConv(nn.Module):
    """f_gconv (eqs. 7-9): o_i = tanh(W_h i_i + b_h), g_i = sigmoid(W_g i_i + b_g), out_i = g_i u_i + (1 - g_i) o_i,
    i_i the window of ``width`` hidden states centred on u_i = h_i (width 1: eq. 10 / 13; width 3: eq. 11).
    W_h and W_g are one convolution with 2d output channels: 2 (width d² + d) parameters."""

    def __init__(self, dim: int, width: int):
        super().__init__()
        if width % 2 != 1:
            raise ValueError(f"a gated convolution is centred on u_i: its width must be odd, got {width}")
        self.conv = nn.Conv1d(dim, 2 * dim, width, padding=width // 2)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # (B, L, d) -> (B, L, d), zero at pads
        out, gate = conv_over(self.conv, h).chunk(2, dim=-1)
        gate = torch.sigmoid(gate)
        return keep(gate * h + (1 - gate) * torch.tanh(out), mask)


class MultiGranular(nn.Module):
    """f_mgran(H) = [f_gconv(h_i); f_gconv([h_{i-1}, h_i, h_{i+1}])] (eqs. 10-12): uni- and tri-gram, (B, L, 2d)."""

    def __init__(self, dim: int):
        super().__init__()
        self.uni = GatedConv(dim, 1)
        self.tri = GatedConv(dim, 3)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.uni(h, mask), self.tri(h, mask)], dim=-1)


# -- the three layers ----------------------------------------------------------------------------------------------


class LightAttConv(nn.Module):
    """Light AttConv (§3.1, eqs. 1-6): the source and the beneficiary are H^x, the focus is H^y."""

    def __init__(self, dim: int, hidden: int, matching: str = "dot",
                 attention: Callable[..., nn.Module] | None = None):
        super().__init__()
        self.context = AttentiveContext(dim, matching, attention)
        self.attconv = AttentiveConvolution(dim, dim, hidden)

    def forward(self, hx: torch.Tensor, mx: torch.Tensor, hy: torch.Tensor, my: torch.Tensor) -> torch.Tensor:
        return self.attconv(hx, self.context(hx, hy, mx, my), mx)  # (B, Lx, hidden)


class AdvancedAttConv(nn.Module):
    """Advanced AttConv (§3.2, eqs. 7-13): contexts between the source f_mgran(H^x) and the focus f_mgran(H^y)
    (one f_mgran for both: "the same architecture"; the focus is also what the weights pool, so c^x_i is 2d), then
    the attentive convolution (eqs. 5-6) over the beneficiary f_bene(H^x) = f_gconv(h^x_i) (eq. 13) and C^x.

    ``share_beneficiary``: f_bene is f_mgran's uni-gram gated convolution (one reading of eqs. 10 and 13) instead of
    its own. Parameters at d = hidden = 300: f_mgran 180,600 + 540,600, f_bene 180,600 (0 when shared),
    W¹ 270,300, W² 180,000: 1,352,100 (1,171,500 shared); the paper says 900K (docs/attconv.md).
    """

    def __init__(self, dim: int, hidden: int, matching: str = "dot",
                 attention: Callable[..., nn.Module] | None = None, share_beneficiary: bool = False):
        super().__init__()
        if not isinstance(share_beneficiary, bool):
            raise ValueError(f"model.share_beneficiary must be true or false, got {share_beneficiary!r}")  # noqa: TRY004
        self.granular = MultiGranular(dim)
        self.beneficiary = self.granular.uni if share_beneficiary else GatedConv(dim, 1)
        self.context = AttentiveContext(2 * dim, matching, attention)
        self.attconv = AttentiveConvolution(dim, 2 * dim, hidden)

    def forward(self, hx: torch.Tensor, mx: torch.Tensor, hy: torch.Tensor, my: torch.Tensor) -> torch.Tensor:
        src, focus = self.granular(hx, mx), self.granular(hy, my)  # (B, Lx, 2d), (B, Ly, 2d)
        ctx = self.context(src, focus, mx, my)  # (B, Lx, 2d)
        return self.attconv(self.beneficiary(hx, mx), ctx, mx)  # (B, Lx, hidden)


class NoConvAttConv(nn.Module):
    """"w/o convolution" (§4, baseline iii): no convolution in eq. 5; c^x_i + h^x_i through ``num_layers`` stacked
    fully connected tanh layers. Four layers of d×d (+ d) = 361,200 at 300, light's 360,300 (the paper's "same
    size of parameters")."""

    def __init__(self, dim: int, hidden: int, matching: str = "dot",
                 attention: Callable[..., nn.Module] | None = None, num_layers: int = 4):
        super().__init__()
        self.context = AttentiveContext(dim, matching, attention)
        sizes = [dim] + [hidden] * num_layers
        self.layers = nn.ModuleList(nn.Linear(i, o) for i, o in itertools.pairwise(sizes))

    def forward(self, hx: torch.Tensor, mx: torch.Tensor, hy: torch.Tensor, my: torch.Tensor) -> torch.Tensor:
        z = hx + self.context(hx, hy, mx, my)  # (B, Lx, d)
        for layer in self.layers:
            z = torch.tanh(layer(z))
        return keep(z, mx)  # (B, Lx, hidden)
