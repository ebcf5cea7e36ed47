"""CoDA attention as a KeOps reduction: the peer that Flash-CoDA is timed against (``pip install 'coda-exp[keops]'``).

``keops_coda_attention(q, k, v, ...)`` computes what ``coda_attention`` does (eqs. 1-5, 10) for the options KeOps
can express, as one symbolic sum over keys that KeOps compiles and runs blockwise, never storing M (its "generic
O(N)-memory reductions"; CUDA tensors run KeOps' GPU code, CPU tensors its C++ backend):

    out_i = sum_j  tanh(alpha q_i . k_j) * g * sigmoid(-beta ||nq_i - nk_j||_1) * valid_ij * v_j

per batch x head slice (the slices are KeOps batch dimensions: (S, L, 1, d) against (S, 1, L, d)). KeOps has no tanh
or sigmoid, so both are written in its exp: tanh(x) = 2 / (1 + exp(-2x)) - 1 on x clamped to [-20, 20] (tanh(20) is
1 in float64 and its slope there 2e-17, so the clamp changes nothing measurable and keeps exp(-2x) finite in
float32), and sigmoid(N) = s / (1 + s) with s = exp(N), N = -beta L1 <= 0, so s is in (0, 1]. The L1 distance is
``(nq_i - nk_j).abs().sum()``. alpha, beta and g enter as KeOps parameters: new values do not recompile.

Masks, as KeOps can take them without anything L x L: a key mask (``mask`` of shape (..., 1, Lk)) multiplies v
(an invalid key adds 0 to every row, and its gradients are 0); a row mask (``mask`` of shape (..., Lq, 1) and/or
``query_mask``) multiplies the output; ``causal`` (key j visible to query i iff j <= i + Lk - Lq) is a Step of
the positions, i and j variables of the formula: one more compare per pair, but the masked half of the pairs is
still computed (KeOps would need block-sparse ``ranges`` to skip it). A dense (Lq, Lk) mask, centring, other
activations, dropout and 16-bit dtypes are refused (:class:`KeOpsUnsupported`) before anything compiles.

Gradients are KeOps' autograd: one more reduction per differentiated input (q, k, v, and n_q, n_k when given), each
recomputing M. Each new formula (dtype, feature sizes, shared or not, causal or not; forward and each gradient) is
compiled once, ~8 s of g++ on a CPU, then cached under ``KEOPS_CACHE_FOLDER`` (default ``~/.cache/keops<version>``).
Its compiler runs ``python -m pybind11 --includes``: pybind11 must be importable by a child Python
(``PYTHONPATH``). Not part of the training path (``coda_exp.peers``).
"""

from __future__ import annotations

import math

import torch

from coda_exp.attention import CoDAOptions
from coda_exp.attention.attend import check_attention_inputs
from coda_exp.attention.functional import query_scaled, resolve_options
from coda_exp.extras import require

FEATURE = "the KeOps CoDA peer (coda_exp.peers.keops_coda)"
DTYPES = (torch.float32, torch.float64)
TANH_CLAMP = 20  # |x| beyond it: tanh(x) = +-1 in float64, and exp(2 * 20) stays finite in float32


class KeOpsUnsupported(ValueError):
    """A call the KeOps peer does not express (the message says what it does)."""


def _refusal(options: CoDAOptions, dtype: torch.dtype, mask: torch.Tensor | None) -> str | None:
    if options.e_fn != "tanh" or options.n_fn != "sigmoid":
        return (f"the KeOps peer computes f_E = tanh and f_N = sigmoid only (written in KeOps' exp), got "
                f"e_fn={options.e_fn!r}, n_fn={options.n_fn!r}")
    if options.centred:
        return "the KeOps peer does not centre (center_e / center_n need means over the valid pairs first)"
    if dtype not in DTYPES:
        return f"the KeOps peer runs float32 and float64 (KeOps has no bfloat16), got {dtype}"
    if mask is not None and mask.shape[-2] != 1 and mask.shape[-1] != 1:
        return (f"the KeOps peer takes a key mask (..., 1, Lk) or a row mask (..., Lq, 1), not a dense pair mask "
                f"{tuple(mask.shape)}: a KeOps formula sees i- and j-variables only (use causal=True for causal)")
    return None


def _slices(t: torch.Tensor, lead: torch.Size) -> torch.Tensor:
    """``t`` (..., L, d) broadcast to ``lead`` + (L, d) and flattened to (S, L, d), S = prod(lead)."""
    return t.broadcast_to(*lead, *t.shape[-2:]).reshape(math.prod(lead), *t.shape[-2:])


def keops_coda_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, options: CoDAOptions | None = None,
                         mask: torch.Tensor | None = None, query_mask: torch.Tensor | None = None,
                         causal: bool = False, n_q: torch.Tensor | None = None, n_k: torch.Tensor | None = None,
                         dropout_p: float = 0.0, **overrides) -> torch.Tensor:
    """out = M V (..., Lq, dv) as ``coda_attention`` computes it (same arguments; ``dropout_p`` must be 0), by KeOps.

    q (..., Lq, de), k (..., Lk, de), v (..., Lk, dv); n_q / n_k the N-side inputs (None: q and k); mask bool
    (..., 1, Lk) (key padding) or (..., Lq, 1) (rows), True = valid; query_mask (..., Lq, 1); ``options`` and/or
    its fields as keywords (default ``CoDAOptions()``: eq. 10's 1/sqrt(d)). Refused (:class:`KeOpsUnsupported`):
    a dense mask, centring, activations other than tanh / sigmoid, dtypes other than float32 / float64. A missing
    pykeops is a :class:`coda_exp.extras.MissingExtraError` naming the ``[keops]`` extra.
    """
    check_attention_inputs(q, k, v, n_q=n_q, n_k=n_k, mask=mask, query_mask=query_mask)
    options = resolve_options(options, overrides)
    refused = _refusal(options, q.dtype, mask) or (
        f"the KeOps peer has no dropout on M (its formula draws no random numbers), got dropout_p={dropout_p}"
        if dropout_p else None)
    if refused:
        raise KeOpsUnsupported(refused)
    shared = n_q is None
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    masks = [m for m in (mask, query_mask) if m is not None]
    lead = torch.broadcast_shapes(*(t.shape[:-2] for t in (q, k, v, *((n_q, n_k) if not shared else ()), *masks)))
    if math.prod(lead) == 0 or lq == 0 or lk == 0:  # nothing to sum (KeOps wants at least one i and one j)
        return q.new_zeros(*lead, lq, dv) + 0 * v.sum()
    require("pykeops", FEATURE)
    from pykeops.torch import LazyTensor

    q, n_q, options = query_scaled(options, q, q if shared else n_q)
    alpha, beta = options.temperatures(q.shape[-1])
    key_mask = row_mask = None
    if mask is not None and mask.shape[-1] == 1:  # (..., Lq or 1, 1): whole rows (or slices)
        row_mask = mask
    elif mask is not None:  # (..., 1, Lk): keys (a dense mask was refused)
        key_mask = mask
    if query_mask is not None:
        row_mask = query_mask if row_mask is None else row_mask & query_mask
    if key_mask is not None:  # an invalid key adds 0: v_j = 0 (and its gradients vanish with it)
        v = v * key_mask.transpose(-1, -2).to(v.dtype)  # (..., Lk, 1)
    q_i = LazyTensor(_slices(q, lead)[:, :, None, :])  # (S, Lq, 1, d)
    k_j = LazyTensor(_slices(k, lead)[:, None, :, :])  # (S, 1, Lk, d)
    v_j = LazyTensor(_slices(v, lead)[:, None, :, :])
    nq_i, nk_j = (q_i, k_j) if shared else (LazyTensor(_slices(n_q, lead)[:, :, None, :]),
                                            LazyTensor(_slices(n_k, lead)[:, None, :, :]))
    x = (alpha * (q_i | k_j)).clamp(-TANH_CLAMP, TANH_CLAMP)
    f_e = 2 / (1 + (-2 * x).exp()) - 1  # tanh(x)
    s_n = (-beta * (nq_i - nk_j).abs().sum()).exp()  # exp(N) in (0, 1]
    weight = f_e * (options.gate * s_n / (1 + s_n))  # tanh(E) g sigmoid(N)
    if causal:  # key j visible to query i iff j <= i + Lk - Lq
        pos = torch.arange(max(lq, lk), dtype=q.dtype, device=q.device)
        i_pos = LazyTensor((pos[:lq] + (lk - lq)).view(1, lq, 1, 1))
        j_pos = LazyTensor(pos[:lk].view(1, 1, lk, 1))
        weight = weight * (i_pos - j_pos).step()
    out = (weight * v_j).sum(dim=2).view(*lead, lq, dv)  # (S, Lq, dv): the sum over keys
    if row_mask is not None:
        out = out * row_mask.to(out.dtype)
    return out
