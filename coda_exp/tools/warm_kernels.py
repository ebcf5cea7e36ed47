"""Compile the numba CPU kernels ahead of use, in parallel processes, into numba's on-disk cache.

    coda-exp warm-kernels [--jobs 2] [--if-cold]   (python -m coda_exp.tools.warm_kernels)

A fresh install compiles each kernel specialisation on its first call (``cache=True``: once per install, then loaded
in milliseconds): ~100 s of CPU here for the ~40 that CoDA's kernels reach (float32 and float64, with and without
masks, forward and backward; the Flash-CoDA CPU kernels are two thirds of it). Processes started side by side before
that (a ``train.py -m`` sweep with the joblib launcher, ``pytest -n 2``) compile the same ones at once. This makes
one tiny call of every path, split by dtype over ``--jobs`` processes (~55-60 s with 2 on this 2-core machine), so
whatever starts next loads from the cache. It computes nothing anyone keeps, and a kernel it does not reach is still
compiled on its first use.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

_KERNELS = Path(__file__).resolve().parent.parent / "attention" / "kernels"
_SOURCES = ("numba_cpu.py", "numba_flash.py")


def cold() -> bool:
    """True unless numba's cache beside the kernels (``__pycache__``) holds an index newer than each kernel source:
    a fresh install, or a source edited since (numba then recompiles it). Unknown (``NUMBA_CACHE_DIR`` elsewhere):
    True, and warming a warm cache costs only the processes' start (~5 s)."""
    import importlib.util

    if importlib.util.find_spec("numba") is None:
        return False  # nothing to compile
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    cache = _KERNELS / "__pycache__"
    for source in _SOURCES:
        stem = source[:-3]
        indexes = list(cache.glob(f"{stem}.*.nbi")) if cache.is_dir() else []
        if not indexes or max(i.stat().st_mtime for i in indexes) < (_KERNELS / source).stat().st_mtime:
            return True
    return False


def _paths() -> list[tuple[str, dict]]:
    """(kernel, options) of each warm-up call: every CPU kernel, float32 and float64, with and without masks."""
    paths = []
    for dtype in ("float32", "float64"):
        for kernel in ("fused", "numba", "flash"):
            for masked in (False, True):
                paths.append((kernel, {"dtype": dtype, "masked": masked, "causal": masked, "dropout": 0.0}))
        paths.append(("flash", {"dtype": dtype, "masked": False, "causal": False, "dropout": 0.1}))
        paths.append(("fused", {"dtype": dtype, "masked": True, "causal": False, "dropout": 0.0, "cross": True}))
    return paths


def _run(kernel: str, spec: dict) -> None:
    import torch

    from coda_exp.attention import CoDAOptions, coda_attention
    from coda_exp.attention.attend import run_coda_cross_attention

    dtype = getattr(torch, spec["dtype"])
    options = CoDAOptions(kernel=kernel)
    if spec.get("cross"):
        a, b = torch.randn(2, 5, 8, dtype=dtype), torch.randn(2, 4, 8, dtype=dtype)
        e_a, e_b, n_a, n_b = (x.clone().requires_grad_() for x in (a, b, a, b))
        keep_a, keep_b = torch.ones(2, 5, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
        out = run_coda_cross_attention(a, b, e_a, e_b, n_a, n_b, options, keep_a, keep_b)[:2]
        sum(o.sum() for o in out).backward()
        return
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, generator=gen, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = (torch.arange(5) < 4).view(1, 1, 1, 5).expand(2, 1, 5, 5) if spec["masked"] else None
    out = coda_attention(q, k, v, options=options, mask=mask, causal=spec["causal"], dropout_p=spec["dropout"])
    out.square().sum().backward()
    n_q, n_k = (torch.randn(2, 2, 5, 3, generator=gen, dtype=dtype, requires_grad=True) for _ in range(2))
    out = coda_attention(q, k, v, options=options, mask=mask, n_q=n_q, n_k=n_k)  # unshared N inputs
    out.square().sum().backward()


def warm(part: int = 0, parts: int = 1) -> int:
    """Run part ``part`` of ``parts`` of the warm-up calls; the number run. The parts split by dtype first (the
    specialisations of one dtype share their helpers: two processes compiling them would compile them twice)."""
    from coda_exp.attention.kernels import numba_cpu

    if not numba_cpu.HAVE_NUMBA:
        return 0
    paths = sorted(_paths(), key=lambda path: path[1]["dtype"])
    size = -(-len(paths) // parts)
    mine = paths[part * size:(part + 1) * size]
    for kernel, spec in mine:
        _run(kernel, spec)
    return len(mine)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="processes compiling side by side (default 2)")
    parser.add_argument("--if-cold", action="store_true", help="only where the cache is missing or older than "
                        "the kernels' sources (what make setup does)")
    parser.add_argument("--part", type=int, default=None, help=argparse.SUPPRESS)  # one worker's share
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.part is not None:
        warm(args.part, args.jobs)
        return 0
    if args.if_cold and not cold():
        return 0
    start = time.time()
    env = dict(os.environ, OMP_NUM_THREADS="1")  # tiny calls: no thread pools to start
    env.pop("CODA_KERNEL", None)  # it would send every call to one kernel
    workers = [subprocess.Popen([sys.executable, "-m", "coda_exp.tools.warm_kernels", "--jobs", str(args.jobs),
                                 "--part", str(part)], env=env) for part in range(args.jobs)]
    failed = [w.args for w in workers if w.wait() != 0]
    print(f"numba kernels warm in {time.time() - start:.1f} s ({args.jobs} processes)"
          + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
