"""What every attention returns for analysis: one typed object, the same field names for softmax and CoDA."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass(frozen=True)
class AttentionMaps:
    """The matrices of one attention call, each (..., la, lb) (multi-head: (B, H, Lq, Lk)).

    weights: the matrix applied to the values: softmax probabilities (Parikh et al. eq. 2; Vaswani et al.) or
    CoDA's M = f_E(E) * g * f_N(N) (eqs. 3-5, 10), so ``a_aligned = weights @ b``.
    mask: bool pairs, True = valid (broadcastable to ``weights``), or None when nothing is masked.
    reverse_weights: softmax cross-attention only, the column softmax whose transpose pools a for each b_j
    (``b_aligned = reverse_weights^T a``); None when the reverse direction uses ``weights`` itself (CoDA, eq. 7).
    scores: softmax only, the logits fed to the softmax.
    E, N: CoDA only, the affinities fed to the activations (eqs. 1-2, after centring, eqs. 4 and 6);
    f_E = f_E(E); f_N = f_N(N) unscaled; gate = g * f_N(N) (eq. 5). Invalid pairs are exactly 0 in every CoDA
    field and in ``weights``.
    """

    weights: torch.Tensor
    mask: torch.Tensor | None = None
    reverse_weights: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    E: torch.Tensor | None = None
    N: torch.Tensor | None = None
    f_E: torch.Tensor | None = None
    f_N: torch.Tensor | None = None
    gate: torch.Tensor | None = None

    def names(self) -> list[str]:
        """The matrix fields present (not None), ``mask`` excluded."""
        return [f.name for f in fields(self) if f.name != "mask" and getattr(self, f.name) is not None]

    def valid(self) -> torch.Tensor:
        """The bool pair mask broadcast to the shape of ``weights`` (all True without a mask)."""
        if self.mask is None:
            return torch.ones(self.weights.shape, dtype=torch.bool, device=self.weights.device)
        return torch.broadcast_to(self.mask, self.weights.shape)

    def values(self, name: str) -> torch.Tensor:
        """The valid pairs of the matrix ``name`` as a 1-D tensor; KeyError naming the fields present."""
        value = getattr(self, name, None) if name != "mask" else None
        if value is None:
            raise KeyError(f"AttentionMaps has no {name!r}; present: {self.names()}")
        return value[self.valid()]
