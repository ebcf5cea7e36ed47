"""Small building blocks shared by attention modules and models (no task or config knowledge)."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """``num_layers`` x (dropout -> linear -> ReLU), the F/G/H networks of DecompAtt (Parikh et al. 2016, §3).

    ``MLP(200, 200)`` is the paper's 2-layer ReLU network of hidden size 200.
    """

    def __init__(self, in_dim: int, hidden: int, num_layers: int = 2, dropout: float = 0.2,
                 activation: str = "relu"):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"MLP needs num_layers >= 1, got {num_layers}")
        acts = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU, "identity": nn.Identity}
        if activation not in acts:
            raise ValueError(f"unknown activation {activation!r}; expected one of {sorted(acts)}")
        layers: list[nn.Module] = []
        dim = in_dim
        for _ in range(num_layers):
            layers += [nn.Dropout(dropout), nn.Linear(dim, hidden), acts[activation]()]
            dim = hidden
        self.net = nn.Sequential(*layers)
        self.out_dim = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in_dim) -> (..., hidden)
        return self.net(x)
