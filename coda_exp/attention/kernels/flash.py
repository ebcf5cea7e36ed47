"""Flash-CoDA: CoDA attention out = M V computed block by block, never storing M (Tay et al. 2019, eqs. 1-5, 10).

CoDA has no softmax, hence no row normalisation: out_i = Σ_j f_E(E_ij) · g · f_N(N_ij) · v_j is a plain sum over key
blocks, and E_ij, N_ij are recomputed from q, k (and the N-side inputs nq, nk) wherever they are needed, as
FlashAttention does for softmax. The backward recomputes each block too. What is computed, for every backend, is
fixed by ``flash_spec`` (contract, counter-based dropout, materialising reference).

This module is the op: ``flash_attention(q, k, v, *, params, n_q, n_k, mask, query_mask, backend)`` (differentiable
in q, k, v and n_q, n_k) on the backend for the inputs' device (``flash_backend``: ``flash_cpu``, numba, for
float32/float64 CPU tensors; ``flash_triton`` for CUDA tensors), and ``flash_params`` (a ``CoDAOptions`` as the
kernels' scalars). When it runs is ``dispatch``'s decision; ``attend.coda_attention`` is the user's entry point.
Centring (eqs. 4, 6) needs the mean of E or N over the valid pairs of a row or slice before f_E / f_N: the Triton
backend streams it (extra passes for the means, ``flash_triton._centring``); the numba one does not centre.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from coda_exp.attention.flash_spec import FlashParams, seed_tensor
from coda_exp.attention.kernels import (
    flash_cpu,
    flash_triton,  # imports without triton (``available`` is then False)
)
from coda_exp.attention.kernels.l1 import refuse_second_derivative, second_derivative_error
from coda_exp.attention.shapes import broadcast_shapes

if TYPE_CHECKING:
    from coda_exp.attention.options import CoDAOptions

BACKENDS = ("cpu", "triton")


def _triton_available(device_type: str) -> bool:
    return flash_triton.available(device_type)


def flash_backend(device_type: str, dtype: torch.dtype | None) -> str | None:
    """The Flash-CoDA backend for tensors on ``device_type`` (of ``dtype``): ``cpu`` (numba) on CPU, ``triton`` on
    CUDA; None when none can run (no numba, an unsupported dtype, CUDA without Triton, another device)."""
    if device_type == "cpu":
        return "cpu" if flash_cpu.available("cpu", dtype) else None
    if device_type == "cuda" and dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return "triton" if _triton_available("cuda") else None
    return None


def _module(backend: str):
    if backend == "cpu":
        return flash_cpu
    if backend == "triton":
        if not flash_triton.HAVE_TRITON:
            raise RuntimeError("the triton Flash-CoDA backend needs triton (pip install triton)")
        return flash_triton
    raise ValueError(f"Flash-CoDA backend must be one of {list(BACKENDS)}, got {backend!r}")


# The backends' forward and backward as torch.library custom ops with fake (shape-only) implementations and a
# registered autograd formula: torch.compile traces a model through Flash-CoDA without a graph break (it can trace
# neither numba nor the Triton launch code). ``FlashParams`` travels as its fields; nq, nk None = q, k.
def _params(alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed, shared_n, center_e, center_n,
            center_over) -> FlashParams:
    return FlashParams(alpha=alpha, beta=beta, gate=gate, e_fn=e_fn, n_fn=n_fn, causal=causal, dropout_p=dropout_p,
                       seed=seed, shared_n=shared_n, center_e=center_e, center_n=center_n, center_over=center_over)


def _forward_impl(q, k, v, nq, nk, mask, query_mask, alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed,
                  shared_n, center_e, center_n, center_over, backend) -> torch.Tensor:
    params = _params(alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed, shared_n, center_e, center_n, center_over)
    n_q, n_k = (q, k) if shared_n else (nq, nk)
    return _module(backend).forward(q, k, v, n_q, n_k, mask, query_mask, params)


def _backward_impl(dout, q, k, v, nq, nk, mask, query_mask, alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed,
                   shared_n, center_e, center_n, center_over, backend):
    params = _params(alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed, shared_n, center_e, center_n, center_over)
    n_q, n_k = (q, k) if shared_n else (nq, nk)
    return _module(backend).backward(q, k, v, n_q, n_k, mask, query_mask, params, dout.contiguous())


@torch.library.custom_op("coda_exp::flash_coda", mutates_args=())
def _flash_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, nq: torch.Tensor | None, nk: torch.Tensor | None,
              mask: torch.Tensor | None, query_mask: torch.Tensor | None, alpha: float, beta: float, gate: float,
              e_fn: str, n_fn: str, causal: bool, dropout_p: float, seed: torch.Tensor, shared_n: bool,
              center_e: bool, center_n: bool, center_over: str, backend: str) -> torch.Tensor:
    return _forward_impl(q, k, v, nq, nk, mask, query_mask, alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed,
                         shared_n, center_e, center_n, center_over, backend)


@_flash_op.register_fake
def _(q, k, v, nq, nk, mask, query_mask, alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed, shared_n, center_e,
      center_n, center_over, backend):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],))


@torch.library.custom_op("coda_exp::flash_coda_backward", mutates_args=())
def _flash_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       nq: torch.Tensor | None, nk: torch.Tensor | None, mask: torch.Tensor | None,
                       query_mask: torch.Tensor | None, alpha: float, beta: float, gate: float, e_fn: str, n_fn: str,
                       causal: bool, dropout_p: float, seed: torch.Tensor, shared_n: bool, center_e: bool,
                       center_n: bool, center_over: str, backend: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv, dnq, dnk); with ``shared_n`` the L1 gradients are in dq / dk and dnq, dnk are empty."""
    dq, dk, dv, dnq, dnk = _backward_impl(dout, q, k, v, nq, nk, mask, query_mask, alpha, beta, gate, e_fn, n_fn,
                                          causal, dropout_p, seed, shared_n, center_e, center_n, center_over, backend)
    return dq, dk, dv, q.new_empty(0) if dnq is None else dnq, q.new_empty(0) if dnk is None else dnk


@_flash_backward_op.register_fake
def _(dout, q, k, v, nq, nk, mask, query_mask, alpha, beta, gate, e_fn, n_fn, causal, dropout_p, seed, shared_n,
      center_e, center_n, center_over, backend):
    if shared_n:
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), q.new_empty(0), q.new_empty(0)
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), nq.new_empty(nq.shape),
            nk.new_empty(nk.shape))


_SHARED = 8  # shared_n's place among the op's arguments after q, k, v, nq, nk, mask, query_mask


def _flash_setup_context(ctx, inputs, output):
    q, k, v, nq, nk, mask, query_mask, *scalars = inputs
    ctx.save_for_backward(q, k, v, *(() if scalars[_SHARED] else (nq, nk)))
    ctx.masks, ctx.scalars = (mask, query_mask), scalars


def _saved_backward(ctx, dout, run):
    """The op's input gradients from what ``_flash_setup_context`` saved, through ``run`` (the backward op, or its
    implementation outside torch.compile): (dq, dk, dv, dnq, dnk) and None for masks and scalars."""
    saved = ctx.saved_tensors
    shared = ctx.scalars[_SHARED]
    nq, nk = (None, None) if shared else saved[3:]
    dq, dk, dv, dnq, dnk = run(dout, *saved[:3], nq, nk, *ctx.masks, *ctx.scalars)
    return (dq, dk, dv, None if shared else dnq, None if shared else dnk, *([None] * (2 + len(ctx.scalars))))


def _flash_backward(ctx, dout):
    return _saved_backward(ctx, dout, _flash_backward_op)


_flash_op.register_autograd(_flash_backward, setup_context=_flash_setup_context)
refuse_second_derivative(_flash_backward_op, "flash")


class _EagerFlash(torch.autograd.Function):
    """The same forward and backward outside torch.compile, without the custom ops' Python dispatch (~1 ms per
    forward + backward on this CPU, against ~0.2 for the Triton host code itself: at short sequences, where the
    kernels take microseconds, that dispatch made an eager CoDA training step slower than the materialising path)."""

    @staticmethod
    def forward(ctx, q, k, v, nq, nk, mask, query_mask, *scalars):
        out = _forward_impl(q, k, v, nq, nk, mask, query_mask, *scalars)
        _flash_setup_context(ctx, (q, k, v, nq, nk, mask, query_mask, *scalars), out)
        return out

    @staticmethod
    def backward(ctx, dout):
        if torch.is_grad_enabled():  # create_graph: its result would carry no graph, a silently wrong 2nd derivative
            raise second_derivative_error("flash")
        return _saved_backward(ctx, dout, _backward_impl)


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
    lead = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                            *(() if shared else (n_q.shape[:-2], n_k.shape[:-2])))
    lq, lk = q.shape[-2], k.shape[-2]
    if mask is not None:
        lead = broadcast_shapes(lead, mask.shape[:-2])
    if query_mask is not None:
        lead = broadcast_shapes(lead, query_mask.shape[:-2])
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
    p = params
    seed = seed_tensor(p.seed, q.device)
    # the custom op where torch traces or transforms (compile: no graph break; vmap: its batching), else the Function
    traced = torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active()
    op = _flash_op if traced else _EagerFlash.apply
    out = op(q4, k4, v4, *(ns if ns else (None, None)), mask4, qm4, float(p.alpha), float(p.beta),
             float(p.gate), p.e_fn, p.n_fn, bool(p.causal), float(p.dropout_p), seed, shared,
             bool(p.center_e), bool(p.center_n), p.center_over, backend)
    return out.reshape(lead + (lq, v.shape[-1]))


def flash_params(options: CoDAOptions, dim: int, *, causal: bool = False, dropout_p: float = 0.0,
                 generator: torch.Generator | None = None, device: torch.device | str | None = None) -> FlashParams:
    """``FlashParams`` of ``options`` for features of size ``dim``; with dropout a seed drawn from torch's RNG on
    ``device`` (the inputs' device) and left there as a tensor: no host sync, no graph break under torch.compile,
    and a captured CUDA graph draws a fresh one at each replay."""
    alpha, beta = options.temperatures(dim)
    seed = torch.randint(0, 2 ** 31 - 1, (1,), generator=generator, device=device) if dropout_p > 0 else 0
    return FlashParams(alpha=alpha, beta=beta, gate=options.gate, e_fn=options.e_fn, n_fn=options.n_fn,
                       causal=causal, dropout_p=float(dropout_p), seed=seed, center_e=options.center_e,
                       center_n=options.center_n, center_over=options.center_over)
