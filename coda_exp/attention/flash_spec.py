"""What every Flash-CoDA backend computes: the contract, the reference and the dropout hash (one source of truth).

Flash-CoDA computes out = (dropout(M) ⊙ valid) V without storing M (..., Lq, Lk), where, per (batch, head) slice,

    E_ij = alpha · q_i · k_j,    N_ij = -beta · ||nq_i - nk_j||_1,    M_ij = f_E(E_ij) · gate · f_N(N_ij)

(Tay et al. 2019, eqs. 1-3, 5, 10; alpha and beta already include any 1/sqrt(d) scaling; no centring). A pair
(i, j) is valid when ``mask[b, h, i, j]`` (None: all), ``query_mask[b, h, i]`` (None: all) and, with ``causal``,
j <= i + (Lk - Lq). Invalid pairs contribute exactly 0; rows are not normalised (CoDA has no softmax).

Backend functions (``forward`` / ``backward``) take 4-D tensors on one device, one floating dtype, contiguous:
q (B, H, Lq, de), k (B, H, Lk, de), v (B, H, Lk, dv), nq (B, H, Lq, dn), nk (B, H, Lk, dn); ``mask`` None or a bool
(B, H, Lq, Lk) *expanded view* (stride 0 on broadcast dims: never materialised), ``query_mask`` None or a bool
(B, H, Lq) expanded view, and ``FlashParams``. ``forward(...) -> out (B, H, Lq, dv)`` in the input dtype;
``backward(..., dout) -> (dq, dk, dv, dnq, dnk)``; with ``params.shared_n`` (nq is q and nk is k, CoDAScoring's
eq. 10) the L1 gradients are added into dq / dk and dnq = dnk = None.

Dropout on M (``dropout_p`` > 0) is counter-based so a backward can regenerate it block by block: pair (s, i, j) of
flattened slice s = b·H + h is kept iff ``uniform(seed, s, i, j) >= dropout_p``, kept values scaled by
1 / (1 - dropout_p); ``uniform`` = the top 24 bits of a 32-bit hash (``hash32``) times 2^-24.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from coda_exp.attention.activations import E_FUNCTIONS, N_FUNCTIONS

#: the Triton backend's backward kernels (``flash_triton.BACKWARD``, else the environment variable
#: :data:`BACKWARD_ENV`, else fused, split under deterministic algorithms): "split" (over key blocks, then query
#: blocks) or "fused" (each tile once, dq by atomic adds)
BACKWARDS = ("split", "fused")
BACKWARD_ENV = "CODA_FLASH_BACKWARD"


def backward_env_problem() -> str | None:
    """What is wrong with :data:`BACKWARD_ENV` (not set or empty: nothing), checked at start-up without Triton."""
    value = os.environ.get(BACKWARD_ENV, "")
    if value and value not in BACKWARDS:
        return (f"environment variable {BACKWARD_ENV} must be one of {list(BACKWARDS)} (or unset: fused, split "
                f"under deterministic algorithms), got {value!r}")
    return None

MASK32 = 0xFFFFFFFF
MIX_A, MIX_B = 0x7FEB352D, 0x846CA68B  # lowbias32 (C. Wellons) multipliers


@dataclass(frozen=True)
class FlashParams:
    """Scalars of one call: temperatures (scaling included), gate, activations, causal flag, dropout, shared_n."""

    alpha: float
    beta: float
    gate: float
    e_fn: str
    n_fn: str
    causal: bool = False
    dropout_p: float = 0.0
    # 0 <= seed < 2^31, or a one-element integer tensor holding it, drawn on the inputs' device: the kernels read it
    # there (no host sync, nothing for torch.compile to break on, and a CUDA graph replays a fresh draw)
    seed: int | torch.Tensor = 0
    shared_n: bool = False
    # eqs. 6 / 4: E / N minus its mean over the valid pairs (mask, query_mask, causal; dropout aside) of each row
    # ("row") or slice ("slice"), before f_E / f_N (the Triton backend streams it: extra passes for the means)
    center_e: bool = False
    center_n: bool = False
    center_over: str = "row"

    @property
    def centred(self) -> bool:
        return self.center_e or self.center_n


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on int64 tensors holding uint32 values (every product masked back to 32 bits)."""
    x = x ^ (x >> 16)
    x = (x * MIX_A) & MASK32
    x = x ^ (x >> 15)
    x = (x * MIX_B) & MASK32
    return x ^ (x >> 16)


def hash32(seed: int, s: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """mix32(mix32(mix32(seed + s) + i) + j), additions mod 2^32; int64 tensors (broadcast)."""
    h = mix32((s + seed) & MASK32)
    h = mix32((h + i) & MASK32)
    return mix32((h + j) & MASK32)


def seed_tensor(seed: int | torch.Tensor, device) -> torch.Tensor:
    """The seed as a one-element int64 tensor on ``device`` (what the op and the Triton kernels read): a tensor seed
    moved there, an int one written by a fill, not a host-to-device copy (so a CUDA graph can capture it)."""
    if isinstance(seed, torch.Tensor):
        return seed.reshape(1).to(device=device, dtype=torch.int64)
    return torch.full((1,), int(seed), dtype=torch.int64, device=device)


def seed_value(seed: int | torch.Tensor) -> int:
    """The seed as a Python int (references and CPU backends; a CUDA tensor syncs)."""
    return int(seed.reshape(-1)[0]) if isinstance(seed, torch.Tensor) else int(seed)


def dropout_keep(seed: int, p: float, shape: tuple[int, int, int, int], device=None) -> torch.Tensor:
    """The bool keep mask (B, H, Lq, Lk) of the counter-based dropout (for references and tests only: L × L)."""
    b, h, lq, lk = shape
    s = torch.arange(b * h, dtype=torch.int64, device=device).view(b, h, 1, 1)
    i = torch.arange(lq, dtype=torch.int64, device=device).view(1, 1, lq, 1)
    j = torch.arange(lk, dtype=torch.int64, device=device).view(1, 1, 1, lk)
    uniform = (hash32(seed, s, i, j) >> 8).to(torch.float64) * 2.0 ** -24
    return uniform >= p


def valid_pairs(mask, query_mask, causal: bool, lq: int, lk: int, device) -> torch.Tensor | None:
    """The bool validity of every pair, broadcastable to (B, H, Lq, Lk) (reference only: may be L × L)."""
    valid = mask
    if query_mask is not None:
        qm = query_mask[..., None]
        valid = qm if valid is None else valid & qm
    if causal:
        tri = torch.ones(lq, lk, dtype=torch.bool, device=device).tril(diagonal=lk - lq)
        valid = tri if valid is None else valid & tri
    return valid


def reference_forward(q, k, v, nq, nk, mask, query_mask, params: FlashParams) -> torch.Tensor:
    """The materialising reference (plain PyTorch, differentiable): what every backend must match."""

    energy = params.alpha * (q @ k.transpose(-1, -2))
    neg = -params.beta * (nq[..., :, None, :] - nk[..., None, :, :]).abs().sum(-1)
    valid = valid_pairs(mask, query_mask, params.causal, q.shape[-2], k.shape[-2], q.device)
    if params.center_e:
        energy = _centred(energy, valid, params.center_over)
    if params.center_n:
        neg = _centred(neg, valid, params.center_over)
    m = E_FUNCTIONS[params.e_fn](energy) * params.gate * N_FUNCTIONS[params.n_fn](neg)
    if valid is not None:
        m = torch.where(valid, m, torch.zeros((), dtype=m.dtype, device=m.device))
    if params.dropout_p > 0:
        keep = dropout_keep(seed_value(params.seed), params.dropout_p, tuple(m.shape), m.device)
        m = torch.where(keep, m / (1.0 - params.dropout_p), torch.zeros((), dtype=m.dtype, device=m.device))
    return m @ v


def _centred(x: torch.Tensor, valid: torch.Tensor | None, over: str) -> torch.Tensor:
    """x minus its mean over the valid pairs of each row / slice (none valid: mean 0)."""
    dims = (-2, -1) if over == "slice" else (-1,)
    valid = torch.ones_like(x, dtype=torch.bool) if valid is None else torch.broadcast_to(valid, x.shape)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    total = torch.where(valid, x, zero).sum(dim=dims, keepdim=True)
    return x - total / valid.sum(dim=dims, keepdim=True).clamp(min=1).to(x.dtype)
