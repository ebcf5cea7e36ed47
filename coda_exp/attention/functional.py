"""CoDA quasi-attention as plain functions (Tay et al. 2019, §2, eqs. 1-7).

``coda_components`` builds the dual affinities and their composition and returns every intermediate;
``coda_matrix`` returns only M; ``compositional_pool`` applies M (eq. 7). Shapes: e_a (..., la, de),
e_b (..., lb, de), n_a (..., la, dn), n_b (..., lb, dn); mask bool (..., la, lb) True = valid pair (broadcastable,
e.g. (B, 1, la, lb) over heads). Invalid pairs of every returned matrix are exactly 0 and enter no mean.
"""

from __future__ import annotations

import math

import torch

from coda_exp.attention.fused import fused_coda_matrix, use_fused
from coda_exp.attention.l1 import l1_distance


def _algebraic(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(1 + x^2): the 'algebraic' sigmoid of Table 9, range (-1, 1)."""
    return x * torch.rsqrt(1.0 + x * x)


E_FUNCTIONS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid}
N_FUNCTIONS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "arctan": torch.atan, "algebraic": _algebraic}
CENTER_OVER = ("slice", "row")
# open range (lo, hi) of each function; the composition bounds used in docs and tests
FUNCTION_RANGES = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0), "arctan": (-math.pi / 2, math.pi / 2),
                   "algebraic": (-1.0, 1.0)}


def check_coda_options(*, alpha: float, beta: float, e_fn: str, n_fn: str, center_e: bool, center_n: bool,
                       gate_scale: float, center_over: str = "slice") -> None:
    """Raise ValueError naming the option and its allowed values for any bad CoDA option."""
    if e_fn not in E_FUNCTIONS:
        raise ValueError(f"e_fn must be one of {sorted(E_FUNCTIONS)}, got {e_fn!r}")
    if n_fn not in N_FUNCTIONS:
        raise ValueError(f"n_fn must be one of {sorted(N_FUNCTIONS)}, got {n_fn!r}")
    if center_over not in CENTER_OVER:
        raise ValueError(f"center_over must be one of {CENTER_OVER}, got {center_over!r}")
    for name, value in (("center_e", center_e), ("center_n", center_n)):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")  # noqa: TRY004 (option value)
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite float >= 0 (a temperature, eqs. 1-2), got {value!r}")
    if not (isinstance(gate_scale, (int, float)) and math.isfinite(gate_scale) and gate_scale > 0):
        raise ValueError(f"gate_scale must be a finite float > 0 (1.0 = eq. 3, 2.0 = eq. 5), got {gate_scale!r}")


def masked_center(x: torch.Tensor, mask: torch.Tensor | None, over: str = "slice") -> torch.Tensor:
    """x - mean(x) over the valid pairs (eqs. 4, 6) of each (..., la, lb) slice ("slice") or of each row i ("row").

    A slice/row with no valid pair is left unchanged.
    """
    dims = (-2, -1) if over == "slice" else (-1,)
    if mask is None:
        return x - x.mean(dim=dims, keepdim=True)
    valid = torch.broadcast_to(mask, x.shape)  # a (B, 1, 1, lb) mask counts every row it covers
    total = torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim=dims, keepdim=True)
    count = valid.sum(dim=dims, keepdim=True).clamp(min=1).to(x.dtype)  # (..., 1, 1) or (..., la, 1)
    return x - total / count


def _coda(e_a, e_b, n_a, n_b, alpha, beta, e_fn, n_fn, center_e, center_n, gate_scale, mask, l1_backend,
          center_over, keep_all: bool, fused: bool | None = False) -> dict[str, torch.Tensor]:
    check_coda_options(alpha=alpha, beta=beta, e_fn=e_fn, n_fn=n_fn, center_e=center_e, center_n=center_n,
                       gate_scale=gate_scale, center_over=center_over)
    if not keep_all and use_fused(e_a, e_b, n_a, n_b, mask, center_e=center_e, center_n=center_n,
                                  l1_backend=l1_backend, fused=fused):
        return {"M": fused_coda_matrix(e_a, e_b, n_a, n_b, alpha=alpha, beta=beta, e_fn=e_fn, n_fn=n_fn,
                                       gate_scale=gate_scale, mask=mask)}  # eqs. 1-5 in one numba pass
    # temperatures are applied to the (..., l, d) inputs, not the (..., la, lb) products: beta >= 0 scales the L1
    # distance exactly, and one pass over a (..., la, lb) tensor is saved per temperature.
    if alpha != 1:
        e_a = e_a * alpha
    if beta != 1:
        n_a, n_b = n_a * beta, n_b * beta
    energy = e_a @ e_b.transpose(-1, -2)  # (..., la, lb)                               eq. 1
    neg = -l1_distance(n_a, n_b, backend=l1_backend)  # (..., la, lb), <= 0 before centring   eq. 2
    if center_e:
        energy = masked_center(energy, mask, center_over)  # eq. 6
    if center_n:
        neg = masked_center(neg, mask, center_over)  # eq. 4
    e_act = E_FUNCTIONS[e_fn](energy)
    f_n = N_FUNCTIONS[n_fn](neg)
    n_act = f_n * gate_scale if gate_scale != 1 else f_n  # eq. 5
    out = {"M": e_act * n_act}  # eq. 3
    if keep_all:
        out.update(E=energy, N=neg, E_act=e_act, N_act=n_act, f_N=f_n)
    if mask is not None:
        zero = torch.zeros((), dtype=energy.dtype, device=energy.device)
        out = {key: torch.where(mask, value, zero) for key, value in out.items()}
    return out


def coda_components(e_a: torch.Tensor, e_b: torch.Tensor, n_a: torch.Tensor, n_b: torch.Tensor, *,
                    alpha: float = 1.0, beta: float = 1.0, e_fn: str = "tanh", n_fn: str = "sigmoid",
                    center_e: bool = False, center_n: bool = False, gate_scale: float = 2.0,
                    mask: torch.Tensor | None = None, l1_backend: str | None = None,
                    center_over: str = "slice") -> dict[str, torch.Tensor]:
    """Dual affinities and their composition; {"E", "N", "E_act", "f_N", "N_act", "M"}, each (..., la, lb).

    E = alpha e_a e_b^T (eq. 1), N = -beta ||n_a_i - n_b_j||_1 (eq. 2), optionally centred over the valid pairs
    (eqs. 6, 4); "E"/"N" are the values fed to the activations (after centring). E_act = f_E(E) (e.g. tanh(E)),
    f_N = f_N(N) (e.g. sigmoid(N)), N_act = gate_scale * f_N(N) (the gate; gate_scale=2 with sigmoid is eq. 5, 1 is
    eq. 3), M = E_act * N_act. Invalid pairs (mask False) are exactly 0 in all six. ``l1_backend`` picks the L1 kernel (see ``l1``).
    ``center_over``: "slice" centres over all valid pairs of each (..., la, lb) slice (the paper's Mean(N) read
    per example); "row" over the valid pairs of each row i, which keeps causal self-attention causal.
    """
    return _coda(e_a, e_b, n_a, n_b, alpha, beta, e_fn, n_fn, center_e, center_n, gate_scale, mask, l1_backend,
                 center_over, keep_all=True)


def coda_matrix(e_a: torch.Tensor, e_b: torch.Tensor, n_a: torch.Tensor, n_b: torch.Tensor, *,
                alpha: float = 1.0, beta: float = 1.0, e_fn: str = "tanh", n_fn: str = "sigmoid",
                center_e: bool = False, center_n: bool = False, gate_scale: float = 2.0,
                mask: torch.Tensor | None = None, l1_backend: str | None = None,
                center_over: str = "slice", fused: bool | None = None) -> torch.Tensor:
    """Quasi-attention matrix M = f_E(E) * gate_scale * f_N(N) (eqs. 1-6), (..., la, lb); invalid pairs exactly 0.

    Defaults: Table 8's best row (no centring) with the gate scaled to [0, 1] (eq. 5). Without centring, on CPU
    with the numba L1 backend, eqs. 1-5 run as one fused kernel (``fused``); ``fused=False`` (or
    ``CODA_FUSED=0``; None reads it, default on) keeps the plain PyTorch composition, which ``l1_backend="torch"``
    always uses.
    """
    return _coda(e_a, e_b, n_a, n_b, alpha, beta, e_fn, n_fn, center_e, center_n, gate_scale, mask, l1_backend,
                 center_over, keep_all=False, fused=fused)["M"]


def compositional_pool(M: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 7: A' = M B (..., la, d) and B' = M^T A (..., lb, d), for M (..., la, lb), a (..., la, d), b (..., lb, d)."""
    return M @ b, M.transpose(-1, -2) @ a
