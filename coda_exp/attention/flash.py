"""Flash-CoDA: CoDA attention out = M V computed block by block, never storing M (Tay et al. 2019, eqs. 1-5, 10).

CoDA has no softmax, hence no row normalisation: out_i = Σ_j f_E(E_ij) · g · f_N(N_ij) · v_j is a plain sum over key
blocks, and E_ij, N_ij are recomputed from q, k (and the N-side inputs nq, nk) wherever they are needed, as
FlashAttention does for softmax. The backward recomputes each block too. What is computed, for every backend, is
fixed by ``flash_spec`` (contract, counter-based dropout, materialising reference).

``coda_attention(q, k, v, *, options, mask, query_mask, causal, n_q, n_k, dropout_p)`` is the op (differentiable
in q, k, v and n_q, n_k); ``run_coda_attention`` returns the name of the kernel that ran as well. The kernel is
``dispatch.select_kernel``'s choice for an attention request: ``flash`` when it applies (no centring, no matrices
requested; float32/float64 CPU tensors with numba: ``_flash_cpu``; CUDA tensors with Triton: ``_flash_triton``) and,
under ``auto``, M would take at least ``SELF_FLASH_MIN_BYTES`` (``CROSS_FLASH_MIN_BYTES`` for the cross-attention);
else another kernel on the materialising path (M from ``functional.run_coda``, then dropout, then M V).

Centring (eqs. 4, 6) needs the mean of E or N over the valid pairs of a row or slice before f_E / f_N; Flash-CoDA
does not compute it: a centred configuration runs the materialising path (the run record names the kernel).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from coda_exp.attention import _flash_cpu
from coda_exp.attention.flash_spec import FlashParams, valid_pairs

if TYPE_CHECKING:
    from coda_exp.attention.options import CoDAOptions

from coda_exp.attention import _flash_triton  # imports without triton (``available`` is then False)

BACKENDS = ("cpu", "triton")
# ``auto`` runs Flash-CoDA in the cross-attention (which computes M twice, once per direction) only from this size of
# M (batch x la x lb x itemsize) up: below, memory is no concern and the one-pass fused kernel is faster (DecompAtt,
# B 64, L 40, d 200: 105 ms fused vs 163 ms flash fwd+bwd, docs/attention.md). ``kernel=flash`` always runs it.
CROSS_FLASH_MIN_BYTES = 64 << 20
# The same for self-attention (M computed once, recomputed in the backward): below this size of M (slices x Lq x Lk
# x itemsize) ``auto`` keeps the fused kernel, whose one pass beats the recomputation (a transformer_base training
# step at 16 x 40 tokens: fused 4.24 s, flash 4.85 s); above it Flash-CoDA is faster as well as lean (B 4, H 8:
# even at L 256, M 8 MiB; 0.75x fused at L 1024). docs/attention.md has the measurements.
SELF_FLASH_MIN_BYTES = 8 << 20


def _triton_available(device_type: str) -> bool:
    return _flash_triton.available(device_type)


def flash_backend(device_type: str, dtype: torch.dtype | None) -> str | None:
    """The Flash-CoDA backend for tensors on ``device_type`` (of ``dtype``): ``cpu`` (numba) on CPU, ``triton`` on
    CUDA; None when none can run (no numba, an unsupported dtype, CUDA without Triton, another device)."""
    if device_type == "cpu":
        return "cpu" if _flash_cpu.available("cpu", dtype) else None
    if device_type == "cuda" and dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return "triton" if _triton_available("cuda") else None
    return None


def _module(backend: str):
    if backend == "cpu":
        return _flash_cpu
    if backend == "triton":
        if not _flash_triton.HAVE_TRITON:
            raise RuntimeError("the triton Flash-CoDA backend needs triton (pip install triton)")
        return _flash_triton
    raise ValueError(f"Flash-CoDA backend must be one of {list(BACKENDS)}, got {backend!r}")


class _FlashCoDA(torch.autograd.Function):
    """Autograd around a backend's ``forward`` / ``backward``; nq, nk None = q, k (``params.shared_n``)."""

    @staticmethod
    def forward(ctx, q, k, v, nq, nk, mask, query_mask, params: FlashParams, backend: str):
        module = _module(backend)
        n_q, n_k = (q, k) if params.shared_n else (nq, nk)
        out = module.forward(q, k, v, n_q, n_k, mask, query_mask, params)
        ctx.save_for_backward(q, k, v, *(() if params.shared_n else (nq, nk)))
        ctx.masks, ctx.params, ctx.backend = (mask, query_mask), params, backend
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        saved = ctx.saved_tensors
        q, k, v = saved[:3]
        n_q, n_k = (q, k) if ctx.params.shared_n else saved[3:]
        dq, dk, dv, dnq, dnk = _module(ctx.backend).backward(q, k, v, n_q, n_k, *ctx.masks, ctx.params,
                                                              dout.contiguous())
        return dq, dk, dv, dnq, dnk, None, None, None, None


def _as_4d(t: torch.Tensor, name: str) -> torch.Tensor:
    if t.dim() < 2:
        raise ValueError(f"{name} must have shape (..., L, d), got {tuple(t.shape)}")
    if t.dim() == 2:
        return t[None, None]
    if t.dim() == 3:
        return t[:, None]
    return t.reshape(-1, t.shape[-3], t.shape[-2], t.shape[-1]) if t.dim() > 4 else t


def flash_attention(q, k, v, *, params: FlashParams, n_q=None, n_k=None, mask=None, query_mask=None,
                    backend: str | None = None) -> torch.Tensor:
    """The Flash-CoDA op on (..., L, d) tensors with ``FlashParams`` (temperatures already scaled).

    mask: bool broadcastable to (..., Lq, Lk) (key padding (B, 1, 1, Lk) stays that size: nothing L × L is built);
    query_mask: bool broadcastable to (..., Lq, 1), True = real query; n_q / n_k: the N-side inputs (None: q / k,
    eq. 10). backend: ``cpu`` | ``triton`` | None (``flash_backend``'s choice for the inputs' device).
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"feature sizes differ: q has d={q.shape[-1]}, k has d={k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v lengths differ: {k.shape[-2]} vs {v.shape[-2]}")
    shared = n_q is None and n_k is None
    if not shared:
        n_q, n_k = (q if n_q is None else n_q), (k if n_k is None else n_k)
        if n_q.shape[-1] != n_k.shape[-1] or n_q.shape[-2] != q.shape[-2] or n_k.shape[-2] != k.shape[-2]:
            raise ValueError(f"n_q {tuple(n_q.shape)} / n_k {tuple(n_k.shape)} must match q's and k's lengths "
                             "and share a feature size")
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                  *(() if shared else (n_q.shape[:-2], n_k.shape[:-2])))
    lq, lk = q.shape[-2], k.shape[-2]
    if mask is not None:
        lead = torch.broadcast_shapes(lead, mask.shape[:-2])
    if query_mask is not None:
        lead = torch.broadcast_shapes(lead, query_mask.shape[:-2])
    expand = [t.expand(lead + t.shape[-2:]) for t in (q, k, v, *(() if shared else (n_q, n_k)))]
    q4, k4, v4, *ns = (_as_4d(t, name).contiguous() for t, name in zip(expand, ("q", "k", "v", "n_q", "n_k")))
    full = q4.shape[:2] + (lq, lk)
    mask4 = None if mask is None else _as_4d(mask.to(torch.bool).expand(lead + (lq, lk)), "mask").expand(full)
    qm4 = None
    if query_mask is not None:
        qm = query_mask.to(torch.bool).expand(lead + (lq, 1))
        qm4 = _as_4d(qm, "query_mask")[..., 0].expand(full[:3])
    backend = backend or flash_backend(q.device.type, q.dtype)
    if backend is None:
        raise ValueError(f"no Flash-CoDA backend for {q.device.type} {q.dtype} tensors")
    params = FlashParams(**{**params.__dict__, "shared_n": shared})
    out = _FlashCoDA.apply(q4, k4, v4, *(ns if ns else (None, None)), mask4, qm4, params, backend)
    return out.reshape(lead + (lq, v.shape[-1]))


def flash_params(options: CoDAOptions, dim: int, *, causal: bool = False, dropout_p: float = 0.0,
                 generator: torch.Generator | None = None) -> FlashParams:
    """``FlashParams`` of ``options`` for features of size ``dim``; a dropout seed drawn from torch's RNG."""
    alpha, beta = options.temperatures(dim)
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=generator)) if dropout_p > 0 else 0
    return FlashParams(alpha=alpha, beta=beta, gate=options.gate, e_fn=options.e_fn, n_fn=options.n_fn,
                       causal=causal, dropout_p=float(dropout_p), seed=seed)


def _materialised(q, k, v, n_q, n_k, options, mask, query_mask, causal, dropout_p, kernel: str):
    """M on the materialising path (``functional.run_coda`` with ``kernel``), dropout, then M V."""
    from coda_exp.attention.functional import (
        run_coda,  # functional imports dispatch, which imports this module
    )

    valid = valid_pairs(mask, None if query_mask is None else query_mask[..., 0], causal, q.shape[-2],
                        k.shape[-2], q.device)
    m, _ = run_coda(q, k, q if n_q is None else n_q, k if n_k is None else n_k, options.replace(kernel=kernel),
                    valid)
    return F.dropout(m, dropout_p, training=dropout_p > 0) @ v


def run_coda_attention(q, k, v, options: CoDAOptions, *, mask=None, query_mask=None, causal: bool = False,
                       n_q=None, n_k=None, dropout_p: float = 0.0) -> tuple[torch.Tensor, str]:
    """(out (..., Lq, dv), the name of the kernel that ran): ``flash`` when ``dispatch`` picks it, else the
    materialising path on the chosen kernel. Masks as in ``flash_attention``; ``dropout_p`` applies to M."""
    from coda_exp.attention.dispatch import describe, requested_kernel, select_kernel

    tensors = [t for t in (q, k, v, n_q, n_k) if t is not None]
    request = describe(*tensors, mask=mask, materialise=options.centred, output="attention")
    kernel = select_kernel(options.kernel, request)
    if options.query_scale:  # T2T's q scaling, before both affinities (n_q None: q itself, scaled once)
        factor = options.query_factor(q.shape[-1])
        q, n_q = q * factor, None if n_q is None else n_q * factor
        options = options.replace(query_scale=False)
    if kernel.name == "flash" and requested_kernel(options.kernel)[0] == "auto":
        slices = math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
        if slices * q.shape[-2] * k.shape[-2] * q.element_size() < SELF_FLASH_MIN_BYTES:
            kernel = select_kernel(options.kernel, dataclasses.replace(request, output="matrix"))
    if kernel.name == "flash":
        params = flash_params(options, q.shape[-1], causal=causal, dropout_p=dropout_p)
        return flash_attention(q, k, v, params=params, n_q=n_q, n_k=n_k, mask=mask, query_mask=query_mask), "flash"
    out = _materialised(q, k, v, n_q, n_k, options, mask, query_mask, causal, dropout_p, kernel.name)
    return out, kernel.name


def coda_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, options: CoDAOptions | None = None,
                   mask: torch.Tensor | None = None, query_mask: torch.Tensor | None = None, causal: bool = False,
                   n_q: torch.Tensor | None = None, n_k: torch.Tensor | None = None, dropout_p: float = 0.0,
                   **overrides) -> torch.Tensor:
    """CoDA attention out = M V (eqs. 1-5, 10) without storing M where the ``flash`` kernel runs.

    q (..., Lq, de), k (..., Lk, de), v (..., Lk, dv); n_q (..., Lq, dn) / n_k (..., Lk, dn): the N-side inputs
    (None: q and k, as in eq. 10); mask: bool broadcastable to (..., Lq, Lk), True = valid pair (a key padding
    mask (B, 1, 1, Lk) is never expanded); query_mask: bool broadcastable to (..., Lq, 1), True = real query
    (padded queries output 0); causal: key j visible to query i iff j <= i + Lk - Lq. ``options`` (default
    ``CoDAOptions()``) and/or its fields as keywords; ``options.kernel`` / ``CODA_KERNEL`` choose the kernel.
    dropout_p: dropout on M (flash: counter-based, drawn from torch's RNG; else ``F.dropout``).
    """
    from coda_exp.attention.functional import resolve_options

    check_attention_inputs(q, k, v, n_q=n_q, n_k=n_k, mask=mask, query_mask=query_mask)
    return run_coda_attention(q, k, v, resolve_options(options, overrides), mask=mask, query_mask=query_mask,
                              causal=causal, n_q=n_q, n_k=n_k, dropout_p=dropout_p)[0]


def check_attention_inputs(q, k, v, *, n_q=None, n_k=None, mask=None, query_mask=None) -> None:
    """One ValueError naming the argument and what was expected, for inputs ``coda_attention`` cannot take
    (instead of a raw torch error deep in a kernel, or, for mixed dtypes on the flash path, a silent cast)."""
    named = {"q": q, "k": k, "v": v, "n_q": n_q, "n_k": n_k}
    for name, t in named.items():
        if t is not None and (not isinstance(t, torch.Tensor) or t.dim() < 2 or not t.is_floating_point()):
            raise ValueError(f"coda_attention: {name} must be a floating tensor (..., L, d), got "
                             f"{type(t).__name__ if not isinstance(t, torch.Tensor) else f'{t.dtype} {tuple(t.shape)}'}")
    given = {name: t for name, t in named.items() if t is not None}
    dtypes = {name: t.dtype for name, t in given.items()}
    if len(set(dtypes.values())) > 1:
        raise ValueError(f"coda_attention: q, k, v (and n_q, n_k) must share one dtype, got "
                         f"{', '.join(f'{n}={d}' for n, d in dtypes.items())}")
    devices = {name: t.device for name, t in given.items()}
    if len(set(devices.values())) > 1:
        raise ValueError(f"coda_attention: q, k, v (and n_q, n_k) must be on one device, got "
                         f"{', '.join(f'{n}={d}' for n, d in devices.items())}")
    lq, lk = q.shape[-2], k.shape[-2]
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"coda_attention: q (..., Lq, {q.shape[-1]}) and k (..., Lk, {k.shape[-1]}) must have the same "
                         "feature size")
    if v.shape[-2] != lk:
        raise ValueError(f"coda_attention: v has {v.shape[-2]} positions, k has {lk}; expected v (..., Lk={lk}, dv)")
    if (n_q is None) != (n_k is None):
        raise ValueError("coda_attention: give both n_q and n_k, or neither")
    if n_q is not None and (n_q.shape[-2] != lq or n_k.shape[-2] != lk or n_q.shape[-1] != n_k.shape[-1]):
        raise ValueError(f"coda_attention: n_q {tuple(n_q.shape)} and n_k {tuple(n_k.shape)} must be (..., Lq={lq}, "
                         f"dn) and (..., Lk={lk}, dn)")
    try:
        lead = torch.broadcast_shapes(*(t.shape[:-2] for t in given.values()))
    except RuntimeError:
        raise ValueError("coda_attention: the batch dimensions of " + ", ".join(
            f"{n} {tuple(t.shape[:-2])}" for n, t in given.items()) + " do not broadcast") from None
    for name, m, want in (("mask", mask, (lq, lk)), ("query_mask", query_mask, (lq, 1))):
        if m is None:
            continue
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            raise ValueError(f"coda_attention: {name} must be a bool tensor (True = valid), got "
                             f"{m.dtype if isinstance(m, torch.Tensor) else type(m).__name__}")
        ok = m.dim() >= 2 and all(a in (1, b) for a, b in zip(m.shape[-2:], want))
        try:
            torch.broadcast_shapes(m.shape[:-2], lead)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"coda_attention: {name} of shape {tuple(m.shape)} does not broadcast to "
                             f"(..., {want[0]}, {want[1]}) with batch dimensions {tuple(lead)}")



def run_coda_cross_attention(a, b, e_a, e_b, n_a, n_b, options: CoDAOptions, mask_a=None, mask_b=None):
    """(a_aligned = M b, b_aligned = M^T a, kernel name) for ``CoDACrossAttention`` (eq. 7) without storing M when
    ``flash`` runs (requested, or ``auto`` with M of at least ``CROSS_FLASH_MIN_BYTES``): M^T is CoDA with the roles swapped (E and the L1 distance are symmetric), so each side is one
    Flash-CoDA call (M is computed twice, block by block). Otherwise (None, None, kernel name): the caller
    materialises M. a (B, la, d), b (B, lb, d), e_* / n_* their projections (n_* is e_* when shared), masks
    (B, la) / (B, lb) True = real token; padded rows of both outputs are 0."""
    from coda_exp.attention.dispatch import describe, requested_kernel, select_kernel

    request = describe(e_a, e_b, n_a, n_b, a, b, mask=mask_a if mask_a is not None else mask_b,
                       materialise=options.centred, output="attention")
    kernel = select_kernel(options.kernel, request)
    if kernel.name != "flash":
        return None, None, kernel.name
    matrix_bytes = e_a.shape[0] * e_a.shape[-2] * e_b.shape[-2] * e_a.element_size()
    if requested_kernel(options.kernel)[0] == "auto" and matrix_bytes < CROSS_FLASH_MIN_BYTES:
        return None, None, "auto"  # small M: the caller materialises it (fused on CPU)
    shared = n_a is e_a and n_b is e_b
    if options.query_scale:  # the a side is the query side of M: scale it once, for both directions
        factor = options.query_factor(e_a.shape[-1])
        e_a = e_a * factor
        n_a = e_a if shared else n_a * factor
    params = flash_params(options, e_a.shape[-1])

    def side(e_q, e_k, n_q, n_k, values, mask_q, mask_k):
        return flash_attention(e_q, e_k, values, params=params, n_q=None if shared else n_q,
                               n_k=None if shared else n_k,
                               mask=None if mask_k is None else mask_k[:, None, :],
                               query_mask=None if mask_q is None else mask_q[:, :, None])

    return (side(e_a, e_b, n_a, n_b, b, mask_a, mask_b), side(e_b, e_a, n_b, n_a, a, mask_b, mask_a), "flash")
