"""CoDA attention as one op, with the kernel chosen once (Tay et al. 2019, eqs. 1-7, 10).

``coda_attention(q, k, v, *, options, mask, query_mask, causal, n_q, n_k, dropout_p)`` is the user's op;
``run_coda_attention`` (what ``CoDAScoring`` calls) returns the name of the kernel that ran as well, and
``run_coda_cross_attention`` (what ``CoDACrossAttention`` calls) computes both directions of eq. 7. Each asks
``dispatch.select_kernel`` once: ``flash`` runs the Flash-CoDA op (``kernels.flash``: M never stored); any other
kernel runs the materialising path on that very kernel (``functional.run_coda``: M, then dropout, then M V).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coda_exp.attention.checks import check_mask, check_tensors
from coda_exp.attention.dispatch import Kernel, describe, select_kernel
from coda_exp.attention.flash_spec import valid_pairs
from coda_exp.attention.functional import compositional_pool, query_scaled, resolve_options, run_coda
from coda_exp.attention.kernels.flash import flash_attention, flash_params
from coda_exp.attention.masking import pair_mask
from coda_exp.attention.options import CoDAOptions
from coda_exp.attention.precision import cast_back, full_precision, matmul_dtype, upcast


def _on_cpu_in_float32(run):
    """``run(*tensors, ...)`` with float16/bfloat16 tensors upcast to float32 and autocast off, its outputs cast
    back, off CUDA (no CPU kernel computes 16-bit: deciding on float32 keeps ``auto``'s CPU choice); on CUDA as is
    (the Triton Flash-CoDA takes 16-bit inputs, a materialising kernel upcasts in ``functional.run_coda``)."""
    def wrapped(*tensors, **kwargs):
        first = tensors[0]
        if first.device.type == "cuda":
            return run(*tensors, **kwargs)
        with full_precision(first.device):  # also for float32 inputs under autocast (a 16-bit bmm inside)
            *outs, name = run(*upcast(*tensors), **kwargs)
        return (*(cast_back(o, first.dtype) for o in outs), name)
    return wrapped


def run_coda_attention(q, k, v, options: CoDAOptions, *, mask=None, query_mask=None, causal: bool = False,
                       n_q=None, n_k=None, dropout_p: float = 0.0) -> tuple[torch.Tensor, str]:
    """(out (..., Lq, dv), the name of the kernel that ran). Masks as in ``coda_attention``; ``dropout_p``
    applies to M (flash: counter-based, drawn from torch's RNG; else ``F.dropout``). float16 / bfloat16 off CUDA:
    computed in float32 (``precision``)."""
    if not (isinstance(dropout_p, (int, float)) and 0.0 <= dropout_p < 1.0):  # flash divided by 1 - p unchecked
        raise ValueError(f"dropout_p must be a probability in [0, 1), got {dropout_p!r}")
    return _run_attention(q, k, v, n_q, n_k, options=options, mask=mask, query_mask=query_mask, causal=causal,
                          dropout_p=dropout_p)


@_on_cpu_in_float32
def _run_attention(q, k, v, n_q, n_k, *, options, mask, query_mask, causal, dropout_p):
    tensors = [t for t in (q, k, v, n_q, n_k) if t is not None]
    kernel = select_kernel(options.kernel, describe(*tensors, mask=mask if mask is not None else query_mask,
                                                    centred=options.centred, output="attention"))
    q, n_q, options = query_scaled(options, q, n_q)
    if kernel.name == "flash":
        params = flash_params(options, q.shape[-1], causal=causal, dropout_p=dropout_p, device=q.device)
        return flash_attention(q, k, v, params=params, n_q=n_q, n_k=n_k, mask=mask, query_mask=query_mask), "flash"
    valid = valid_pairs(mask, None if query_mask is None else query_mask[..., 0], causal, q.shape[-2],
                        k.shape[-2], q.device)
    m, _ = run_coda(q, k, q if n_q is None else n_q, k if n_k is None else n_k, options, valid, kernel=kernel)
    return dropout(m, dropout_p) @ v, kernel.name


def dropout(m: torch.Tensor, p) -> torch.Tensor:
    """``F.dropout(m, p)`` where p > 0, else m: the test is Python's, not ``training=p > 0``, which under
    ``torch.compile(dynamic=True)`` (p a symbolic float) hands F.dropout a SymBool it refuses."""
    return F.dropout(m, p) if p > 0 else m


def run_coda_cross_attention(a, b, e_a, e_b, n_a, n_b, options: CoDAOptions, mask_a=None, mask_b=None,
                             ) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(a_aligned = M b, b_aligned = M^T a, the name of the kernel that ran) of eq. 7. a (B, la, d), b (B, lb, d),
    e_* / n_* their projections (n_* is e_* when shared), masks (B, la) / (B, lb) True = real token; padded rows
    of both outputs are 0. With ``flash``, M^T is CoDA with the roles swapped (E and the L1 distance are
    symmetric), so each side is one Flash-CoDA call (M computed twice, block by block, never stored). float16 /
    bfloat16 off CUDA: computed in float32 (``precision``). The outputs have the dtype of a matmul with ``a`` under
    the caller's autocast (``precision.matmul_dtype``), as the maps' path (M b, M^T a) and SoftmaxCrossAttention
    give: under bfloat16 autocast bfloat16, not a's float32."""
    dtype = matmul_dtype(a)
    a_aligned, b_aligned, name = _run_cross(a, b, e_a, e_b, n_a, n_b, options=options, mask_a=mask_a, mask_b=mask_b)
    return a_aligned.to(dtype), b_aligned.to(dtype), name


@_on_cpu_in_float32
def _run_cross(a, b, e_a, e_b, n_a, n_b, *, options, mask_a, mask_b):
    kernel: Kernel = select_kernel(options.kernel, describe(
        e_a, e_b, n_a, n_b, a, b, mask=mask_a if mask_a is not None else mask_b, centred=options.centred,
        output="attention", cross=True))
    if kernel.name != "flash":
        m, _ = run_coda(e_a, e_b, n_a, n_b, options, pair_mask(mask_a, mask_b), kernel=kernel)  # (B, la, lb)
        a_aligned, b_aligned = compositional_pool(m, a, b)
        return a_aligned, b_aligned, kernel.name
    shared = n_a is e_a and n_b is e_b
    e_a, n_a, options = query_scaled(options, e_a, n_a)  # a is M's query side
    params = flash_params(options, e_a.shape[-1])

    def side(e_q, e_k, n_q, n_k, values, mask_q, mask_k):
        return flash_attention(e_q, e_k, values, params=params, n_q=None if shared else n_q,
                               n_k=None if shared else n_k,
                               mask=None if mask_k is None else mask_k[:, None, :],
                               query_mask=None if mask_q is None else mask_q[:, :, None])

    return side(e_a, e_b, n_a, n_b, b, mask_a, mask_b), side(e_b, e_a, n_b, n_a, a, mask_b, mask_a), "flash"


def coda_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, options: CoDAOptions | None = None,
                   mask: torch.Tensor | None = None, query_mask: torch.Tensor | None = None, causal: bool = False,
                   n_q: torch.Tensor | None = None, n_k: torch.Tensor | None = None, dropout_p: float = 0.0,
                   **overrides) -> torch.Tensor:
    """CoDA attention out = M V (eqs. 1-5, 10) without storing M where the ``flash`` kernel runs.

    q (..., Lq, de), k (..., Lk, de), v (..., Lk, dv); n_q (..., Lq, dn) / n_k (..., Lk, dn): the N-side inputs
    (None: q and k, as in eq. 10); mask: bool broadcastable to (..., Lq, Lk), True = valid pair (a key padding
    mask (B, 1, 1, Lk) is never expanded); query_mask: bool broadcastable to (..., Lq, 1), True = real query
    (padded queries output 0); causal: key j visible to query i iff j <= i + Lk - Lq. ``options`` (default
    ``CoDAOptions()``: eq. 10's 1/sqrt(d) scaling) and/or its fields as keywords; ``options.kernel`` /
    ``CODA_KERNEL`` choose the kernel. dropout_p: dropout on M (flash: counter-based, drawn from torch's RNG;
    else ``F.dropout``).
    """
    check_attention_inputs(q, k, v, n_q=n_q, n_k=n_k, mask=mask, query_mask=query_mask)
    return run_coda_attention(q, k, v, resolve_options(options, overrides), mask=mask, query_mask=query_mask,
                              causal=causal, n_q=n_q, n_k=n_k, dropout_p=dropout_p)[0]


def check_attention_inputs(q, k, v, *, n_q=None, n_k=None, mask=None, query_mask=None,
                           caller: str = "coda_attention") -> None:
    """One ValueError naming the argument and what was expected, for inputs ``coda_attention`` (or ``caller``:
    ``CoDAScoring``) cannot take (instead of a raw torch error deep in a kernel, or, for mixed dtypes on the flash
    path, a silent cast); the checks are ``checks``' (shared with ``coda_matrix``)."""
    lead = check_tensors(caller, {"q": q, "k": k, "v": v, "n_q": n_q, "n_k": n_k}, "q, k, v (and n_q, n_k)")
    lq, lk = q.shape[-2], k.shape[-2]
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{caller}: q (..., Lq, {q.shape[-1]}) and k (..., Lk, {k.shape[-1]}) must have the same "
                         "feature size")
    if v.shape[-2] != lk:
        raise ValueError(f"{caller}: v has {v.shape[-2]} positions, k has {lk}; expected v (..., Lk={lk}, dv)")
    if (n_q is None) != (n_k is None):
        raise ValueError(f"{caller}: give both n_q and n_k, or neither")
    if n_q is not None and (n_q.shape[-2] != lq or n_k.shape[-2] != lk or n_q.shape[-1] != n_k.shape[-1]):
        raise ValueError(f"{caller}: n_q {tuple(n_q.shape)} and n_k {tuple(n_k.shape)} must be (..., Lq={lq}, "
                         f"dn) and (..., Lk={lk}, dn)")
    check_mask(caller, "mask", mask, (lq, lk), lead)
    check_mask(caller, "query_mask", query_mask, (lq, 1), lead)
