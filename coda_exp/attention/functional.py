"""CoDA quasi-attention as plain functions (Tay et al. 2019, §2, eqs. 1-7).

``coda_components`` builds the dual affinities and their composition and returns every intermediate as
``AttentionMaps``; ``coda_matrix`` returns only M; ``compositional_pool`` applies M (eq. 7); ``run_coda`` is what
both (and the CoDA modules) call, returning the name of the kernel that ran too. Shapes: e_a (..., la, de),
e_b (..., lb, de), n_a (..., la, dn), n_b (..., lb, dn); mask bool (..., la, lb) True = valid pair (broadcastable,
e.g. (B, 1, la, lb) over heads). Invalid pairs of every returned matrix are exactly 0 and enter no mean. Options:
a ``CoDAOptions`` and/or its fields as keywords (``coda_matrix(..., center_e=True)``); without ``options`` the
equations as printed (``PAPER_EQUATIONS``: no 1/sqrt(d), which is eq. 10's and the modules' default).
"""

from __future__ import annotations

import torch

from coda_exp.attention.activations import E_FUNCTIONS, N_FUNCTIONS
from coda_exp.attention.checks import check_matrix_inputs
from coda_exp.attention.dispatch import Kernel, describe, select_kernel
from coda_exp.attention.maps import AttentionMaps
from coda_exp.attention.options import CoDAOptions
from coda_exp.attention.precision import cast_back, full_precision, upcast


def masked_center(x: torch.Tensor, mask: torch.Tensor | None, over: str = "slice") -> torch.Tensor:
    """x - mean(x) over the valid pairs (eqs. 4, 6) of each (..., la, lb) slice ("slice") or of each row i ("row").

    A slice/row with no valid pair is left unchanged.
    """
    dims = (-2, -1) if over == "slice" else (-1,)
    if mask is None:
        return x - x.mean(dim=dims, keepdim=True)
    shape = torch.broadcast_shapes(x.shape, mask.shape)  # a mask may carry batch dimensions that x shares (size 1)
    x = x.expand(shape)
    valid = torch.broadcast_to(mask, shape)  # a (B, 1, 1, lb) mask counts every row it covers
    total = torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim=dims, keepdim=True)
    count = valid.sum(dim=dims, keepdim=True).clamp(min=1).to(x.dtype)  # (..., 1, 1) or (..., la, 1)
    return x - total / count


# eqs. 1-2 as printed: E = alpha e_a e_b^T, N = -beta ||n_a - n_b||_1, no 1/sqrt(d) (that is eq. 10's, and the
# modules' documented default): what ``coda_matrix`` and ``coda_components`` compute unless told otherwise
PAPER_EQUATIONS = CoDAOptions(scale=False)


def resolve_options(options: CoDAOptions | None, overrides: dict, default: CoDAOptions | None = None) -> CoDAOptions:
    """``options`` (default ``default``, itself by default ``CoDAOptions()``) with the keyword ``overrides``
    applied, validated."""
    if options is not None and not isinstance(options, CoDAOptions):
        raise TypeError(f"options must be a CoDAOptions (or None), got {type(options).__name__}; pass its fields as "
                        f"keywords (alpha=0.5) or CoDAOptions(**{{...}})")
    base = options if options is not None else default if default is not None else CoDAOptions()
    return base.replace(**overrides) if overrides else base


def query_scaled(options: CoDAOptions, e_a: torch.Tensor, n_a: torch.Tensor | None):
    """T2T's q scaling (``query_scale``) applied once, before both affinities: (e_a, n_a, the options without
    it). ``n_a`` that is ``e_a`` stays ``e_a`` (the scaled one); None stays None."""
    if not options.query_scale:
        return e_a, n_a, options
    factor = options.query_factor(e_a.shape[-1])
    scaled = e_a * factor
    return scaled, (scaled if n_a is e_a else None if n_a is None else n_a * factor), options.replace(query_scale=False)


def run_coda(e_a: torch.Tensor, e_b: torch.Tensor, n_a: torch.Tensor, n_b: torch.Tensor, options: CoDAOptions,
             mask: torch.Tensor | None = None, maps: bool = False,
             kernel: Kernel | None = None) -> tuple[torch.Tensor | AttentionMaps, str]:
    """(M (..., la, lb), or ``AttentionMaps`` when ``maps``; the name of the kernel that ran), eqs. 1-6.

    ``kernel``: the one ``dispatch.select_kernel`` chose for the caller (``attend``); None: chosen here. A one-pass
    kernel (``fused``) returns M; the others run the plain composition below on their L1 (centring and ``maps``
    need the intermediates, so ``dispatch`` never picks ``fused`` for them). float16 / bfloat16 inputs are
    computed in float32, autocast off, and the result is returned in their dtype (``precision``).
    """
    dtype = e_a.dtype  # float16 / bfloat16: computed in float32, returned in it (precision.py)
    with full_precision(e_a.device):
        e_a, e_b, n_a, n_b = upcast(e_a, e_b, n_a, n_b)
        result, name = _run_coda(e_a, e_b, n_a, n_b, options, mask, maps, kernel)
    return cast_back(result, dtype), name


def _run_coda(e_a, e_b, n_a, n_b, options: CoDAOptions, mask, maps: bool, kernel: Kernel | None):
    e_a, n_a, options = query_scaled(options, e_a, n_a)  # T2T: q scaled before the attention function
    if kernel is None:
        kernel = select_kernel(options.kernel, describe(e_a, e_b, n_a, n_b, mask=mask, centred=options.centred,
                                                        maps=maps))
    alpha, beta = options.temperatures(e_a.shape[-1])
    if kernel.matrix is not None:  # eqs. 1-5 in one pass
        return kernel.matrix(e_a, e_b, n_a, n_b, alpha=alpha, beta=beta, e_fn=options.e_fn, n_fn=options.n_fn,
                             gate_scale=options.gate, mask=mask), kernel.name
    # temperatures are applied to the (..., l, d) inputs, not the (..., la, lb) products: beta >= 0 scales the L1
    # distance exactly, and one pass over a (..., la, lb) tensor is saved per temperature.
    if alpha != 1:
        e_a = e_a * alpha
    if beta != 1:
        n_a, n_b = n_a * beta, n_b * beta
    energy = e_a @ e_b.transpose(-1, -2)  # (..., la, lb)                               eq. 1
    neg = -kernel.l1(n_a, n_b, None)  # (..., la, lb), <= 0 before centring          eq. 2
    if options.center_e:
        energy = masked_center(energy, mask, options.center_over)  # eq. 6
    if options.center_n:
        neg = masked_center(neg, mask, options.center_over)  # eq. 4
    e_act = E_FUNCTIONS[options.e_fn](energy)
    f_n = N_FUNCTIONS[options.n_fn](neg)
    gate = f_n * options.gate if options.gate != 1 else f_n  # eq. 5
    out = {"weights": e_act * gate}  # eq. 3
    if maps:
        out.update(E=energy, N=neg, f_E=e_act, f_N=f_n, gate=gate)
    if mask is not None:
        zero = torch.zeros((), dtype=energy.dtype, device=energy.device)
        out = {key: torch.where(mask, value, zero) for key, value in out.items()}
    return (AttentionMaps(mask=mask, **out) if maps else out["weights"]), kernel.name


def coda_components(e_a: torch.Tensor, e_b: torch.Tensor, n_a: torch.Tensor, n_b: torch.Tensor,
                    options: CoDAOptions | None = None, *, mask: torch.Tensor | None = None,
                    **overrides) -> AttentionMaps:
    """Dual affinities and their composition as ``AttentionMaps`` (E, N, f_E, f_N, gate, weights = M, mask).

    E = alpha e_a e_b^T (eq. 1), N = -beta ||n_a_i - n_b_j||_1 (eq. 2) as printed (``options`` default:
    ``PAPER_EQUATIONS``, no 1/sqrt(de); ``scale=True`` divides both temperatures by sqrt(de), eq. 10's scaling),
    optionally centred over the valid pairs (eqs. 6, 4); E / N are the values fed to the activations (after
    centring). f_E = f_E(E), f_N = f_N(N), gate = g f_N(N) (g = 2 with sigmoid is eq. 5, 1 is
    eq. 3), weights = M = f_E * gate. Invalid pairs (mask False) are exactly 0 in all six.
    """
    check_matrix_inputs(e_a, e_b, n_a, n_b, mask, caller="coda_components")
    return run_coda(e_a, e_b, n_a, n_b, resolve_options(options, overrides, PAPER_EQUATIONS), mask, maps=True)[0]


def coda_matrix(e_a: torch.Tensor, e_b: torch.Tensor, n_a: torch.Tensor, n_b: torch.Tensor,
                options: CoDAOptions | None = None, *, mask: torch.Tensor | None = None,
                **overrides) -> torch.Tensor:
    """Quasi-attention matrix M = f_E(E) * g * f_N(N) (eqs. 1-6), (..., la, lb); invalid pairs exactly 0.

    ``options`` / keyword ``overrides``: the ``CoDAOptions`` fields (defaults ``PAPER_EQUATIONS``: eqs. 1-2 as
    printed, no 1/sqrt(de) (``scale=True`` for eq. 10's), no centring, gate 2 sigmoid (eq. 5), kernel ``auto``:
    the fused numba kernel on CPU when it applies). Inputs ``coda_matrix`` cannot take (not floating, mixed dtypes
    or devices, sizes that do not pair, a mask not bool or not broadcastable to (..., la, lb)): one ValueError
    naming the argument (``checks.check_matrix_inputs``, as ``coda_attention`` checks its own).
    """
    check_matrix_inputs(e_a, e_b, n_a, n_b, mask)
    return run_coda(e_a, e_b, n_a, n_b, resolve_options(options, overrides, PAPER_EQUATIONS), mask)[0]


def compositional_pool(M: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 7: A' = M B (..., la, d) and B' = M^T A (..., lb, d), for M (..., la, lb), a (..., la, d), b (..., lb, d)."""
    return M @ b, M.transpose(-1, -2) @ a
