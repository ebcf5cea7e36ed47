"""``broadcast_shapes``: ``torch.broadcast_shapes`` for the eager hot path (a leaf of the attention package).

``torch.broadcast_shapes`` goes through torch's reference implementation (symbolic-shape guards for each
dimension): ~35 µs a call on this project's CPU, and a CoDA forward + backward asked it five times, ~40 % of the
Python time around a Flash-CoDA call, which is what a training step at short sequences spends (the kernels there
take microseconds). Plain integer shapes are broadcast here in Python; under ``torch.compile`` (symbolic sizes)
torch's own function runs, as before.
"""

from __future__ import annotations

import torch


def broadcast_shapes(*shapes) -> torch.Size:
    """The shape the given shapes broadcast to; RuntimeError (as torch's) where they do not."""
    if torch.compiler.is_compiling():
        return torch.broadcast_shapes(*shapes)
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape, ndim - len(shape)):
            if n == 1 or n == out[i]:
                continue
            if out[i] != 1:
                raise RuntimeError(f"shape mismatch: objects cannot be broadcast to a single shape: "
                                   f"{' and '.join(str(tuple(s)) for s in shapes)}")
            out[i] = n
    return torch.Size(out)
