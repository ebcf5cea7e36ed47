"""A slow, explicit CoDA (eqs. 1-6) and random inputs with padding: the reference the attention tests compare to."""

from __future__ import annotations

import math

import torch

REF_FN = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "arctan": torch.atan,
          "algebraic": lambda x: x / torch.sqrt(1 + x ** 2)}
RANGE = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0), "arctan": (-math.pi / 2, math.pi / 2), "algebraic": (-1.0, 1.0)}


def reference(e_a, e_b, n_a, n_b, alpha, beta, e_fn, n_fn, center_e, center_n, gate_scale, mask):
    """Eqs. 1-6 written out: explicit (la, lb, d) broadcast, means over the valid pairs slice by slice."""
    energy = alpha * torch.einsum("...id,...jd->...ij", e_a, e_b)
    neg = -beta * (n_a.unsqueeze(-2) - n_b.unsqueeze(-3)).abs().sum(-1)
    full = mask.expand(energy.shape) if mask is not None else torch.ones_like(energy, dtype=torch.bool)

    def center(x):
        flat_x, flat_m = x.reshape(-1, *x.shape[-2:]), full.reshape(-1, *x.shape[-2:])
        means = [xs[ms].mean() if ms.any() else xs.new_zeros(()) for xs, ms in zip(flat_x, flat_m)]
        return x - torch.stack(means).reshape(*x.shape[:-2], 1, 1)

    if center_e:
        energy = center(energy)
    if center_n:
        neg = center(neg)
    m = REF_FN[e_fn](energy) * gate_scale * REF_FN[n_fn](neg)
    return m * full


def make_inputs(seed, batch=(2, 3), la=5, lb=7, de=4, dn=3, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(*batch, la, de), (*batch, lb, de), (*batch, la, dn), (*batch, lb, dn)]
    tensors = [torch.randn(s, dtype=torch.float64, generator=gen).requires_grad_(requires_grad) for s in shapes]
    mask_a = torch.ones(batch[0], la, dtype=torch.bool)
    mask_b = torch.ones(batch[0], lb, dtype=torch.bool)
    mask_a[0, la - 2:] = False
    mask_b[-1, lb - 3:] = False
    mask = (mask_a.unsqueeze(-1) & mask_b.unsqueeze(-2)).reshape(batch[0], *[1] * (len(batch) - 1), la, lb)
    return tensors, mask
