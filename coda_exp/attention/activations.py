"""CoDA's activations f_E and f_N (Tay et al. 2019, Table 9): the functions every kernel and the options share.

A leaf module (it imports torch only), so that kernels, the Flash-CoDA contract and the options can all name the
same functions without importing one another.
"""

from __future__ import annotations

import math

import torch


def _algebraic(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(1 + x^2): the 'algebraic' sigmoid of Table 9, range (-1, 1)."""
    return x * torch.rsqrt(1.0 + x * x)


E_FUNCTIONS = {"tanh": torch.tanh, "sigmoid": torch.sigmoid}  # f_E (Table 9)
N_FUNCTIONS = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "arctan": torch.atan, "algebraic": _algebraic}  # f_N
# open range (lo, hi) of each function; the composition bounds used in docs and tests
FUNCTION_RANGES = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0), "arctan": (-math.pi / 2, math.pi / 2),
                   "algebraic": (-1.0, 1.0)}
