"""Flash-CoDA on CPU: one fused numba loop nest per (batch, head) slice (contract: ``flash_spec``).

``numba_flash.flash_forward`` runs the slices in parallel (numba ``prange``); within a slice, queries go in blocks of
4 rows and keys in blocks of 256 columns. For each (4 × 256) block it computes E = alpha q k^T and the L1 distance
D (the slice's k and nk transposed once to (d, Lk), so every inner loop runs over contiguous keys and vectorises),
f_E(E) · g · f_N(-beta D) with the masks and the counter-based dropout, and accumulates M v into the 4 output rows:
M exists only block by block, never as Lq × Lk. Under a causal mask a row block stops at the last key it may see.

``numba_flash.flash_backward`` recomputes each block with the local derivatives A = dM/dE_raw and B = dM/dD, forms
dM = dout v^T (dropout-masked), then dv += M^T dout, dE = dM A (dq += dE k, dk += dE^T q) and G = dM B straight into
the L1 gradient (dnq_i = Σ_j G_ij sign(nq_i - nk_j), dnk_j = -Σ_i ...). Each thread owns one slice, so the key-side
gradients accumulate in thread-private (d, Lk) buffers without atomics, and the result does not depend on the thread
count: deterministic. Extra memory: O((Lk + block) · d) per thread.

Why slices and not (slice, query block) in parallel: the key-side gradients of one slice would then need a
reduction across threads; with B · H slices there are far more slices than cores here.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from coda_exp.attention.flash_spec import FlashParams, seed_value
from coda_exp.attention.kernels import numba_cpu, numba_flash
from coda_exp.attention.kernels.fused import _mask_layout
from coda_exp.attention.kernels.l1 import NUMBA_DTYPES, set_numba_threads


def available(device_type: str, dtype: torch.dtype | None = None) -> bool:
    """Whether this backend runs on ``device_type`` tensors (of ``dtype``): CPU float32/float64 with numba."""
    return numba_cpu.HAVE_NUMBA and device_type == "cpu" and (dtype is None or dtype in NUMBA_DTYPES)


def _unexpand(t: torch.Tensor | None) -> torch.Tensor | None:
    """The smallest tensor an expanded view was broadcast from (size 1 where the stride is 0)."""
    if t is None:
        return None
    for dim, stride in enumerate(t.stride()):
        if stride == 0 and t.shape[dim] > 1:
            t = t.narrow(dim, 0, 1)
    return t


def _numba_args(q, k, v, nq, nk, mask, query_mask, params: FlashParams):
    """The slices and scalars the fused numba kernels (``numba_flash.flash_forward`` / ``flash_backward``) take."""
    if params.centred:
        raise ValueError("Flash-CoDA (numba): centring (center_e / center_n) runs on the Triton backend only (CUDA); "
                         "on the CPU a centred configuration runs a materialising kernel")
    b, h, lq, _ = q.shape
    lk = k.shape[2]
    s = math.prod((b, h))
    arrays = [t.detach().reshape(s, t.shape[2], t.shape[3]).contiguous().numpy() for t in (q, k, v, nq, nk)]
    flat, offsets, strides = _mask_layout(_unexpand(mask), (b, h), lq, lk)
    qm = _unexpand(query_mask)
    qvalid = (torch.ones(s, lq, dtype=torch.uint8) if qm is None
              else qm.expand(b, h, lq).reshape(s, lq).to(torch.uint8).contiguous()).numpy()
    dtype = arrays[0].dtype
    p = params.dropout_p
    coefs = np.array([params.alpha, params.beta, params.gate, 0.0, p, 1.0 / (1.0 - p)], dtype=dtype)
    codes = np.array([numba_cpu.FUNCTION_CODES[params.e_fn], numba_cpu.FUNCTION_CODES[params.n_fn]], dtype=np.int64)
    consts, ints = numba_cpu.exp_constants(dtype)
    return arrays, (flat, offsets, strides, qvalid, bool(params.causal), np.int64(lk - lq), coefs, codes, consts,
                    ints, np.int64(seed_value(params.seed)))


def forward(q, k, v, nq, nk, mask, query_mask, params: FlashParams) -> torch.Tensor:
    """out (B, H, Lq, dv) = (dropout(M) on valid pairs) v, M never stored beyond one block (``flash_spec``)."""
    arrays, scalars = _numba_args(q, k, v, nq, nk, mask, query_mask, params)
    out = np.zeros(arrays[0].shape[:2] + (arrays[2].shape[2],), dtype=arrays[0].dtype)
    set_numba_threads()
    numba_flash.flash_forward(*arrays, *scalars, out)
    return torch.from_numpy(out).reshape(q.shape[:3] + (v.shape[3],))


def backward(q, k, v, nq, nk, mask, query_mask, params: FlashParams, dout):
    """(dq, dk, dv, dnq, dnk) of ``forward`` (dnq = dnk = None with ``params.shared_n``: added into dq, dk)."""
    arrays, scalars = _numba_args(q, k, v, nq, nk, mask, query_mask, params)
    s = arrays[0].shape[0]
    do = dout.reshape(s, q.shape[2], dout.shape[3]).to(q.dtype).contiguous().numpy()
    dq, dk, dv = (np.empty_like(x) for x in arrays[:3])
    dnq, dnk = ((np.empty((s, 0, 0), dtype=dq.dtype),) * 2 if params.shared_n
                else (np.empty_like(arrays[3]), np.empty_like(arrays[4])))
    set_numba_threads()
    numba_flash.flash_backward(*arrays, *scalars, do, params.shared_n, dq, dk, dv, dnq, dnk)
    grads = [torch.from_numpy(g).reshape(t.shape) for g, t in ((dq, q), (dk, k), (dv, v))]
    if params.shared_n:
        return (*grads, None, None)
    return (*grads, torch.from_numpy(dnq).reshape(nq.shape), torch.from_numpy(dnk).reshape(nk.shape))
