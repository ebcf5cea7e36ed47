#!/usr/bin/env python
"""Where Flash-CoDA beats the fused kernel on this machine: CoDA self-attention fwd+bwd through ``coda_attention``,
``kernel=flash`` vs ``kernel=fused``, over (slices = B x H, L) at d 64, side by side in one run (dispatch's CPU
rule for ``auto`` comes from this: docs/attention.md), and both against SDPA (torch's
``scaled_dot_product_attention``) on the same inputs, interleaved with them.

    python scripts/bench_crossover.py [--slices 4,32,256] [--lengths 128,256,512,1024,2048] [--reps 3] [--json OUT]

Times are medians of ``--reps`` interleaved runs after one warm-up; pairs whose stored M (slices x L^2 x 4 bytes,
three such matrices for the fused backward) would pass ``--max-m-mib`` run flash alone. The JSON names the commit,
the threads and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.pop("CODA_KERNEL", None)

import torch
import torch.nn.functional as F

from coda_exp.attention import coda_attention
from coda_exp.results import git_commit


def step(kernel: str, q, k, v, grad):
    """One fwd+bwd with a dense upstream gradient, as a loss gives in training (``out.sum().backward()`` hands
    autograd an expanded, stride-0 gradient, which made the materialising kernels' M V backward ~2x slower)."""
    def run():
        out = F.scaled_dot_product_attention(q, k, v) if kernel == "sdpa" else coda_attention(q, k, v, kernel=kernel)
        out.backward(grad)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slices", default="4,32,256")
    parser.add_argument("--lengths", default="128,256,512,1024,2048")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-m-mib", type=float, default=512.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows, commit = [], git_commit(ROOT) or "unknown"
    print(f"{'slices':>6} {'L':>5} {'M MiB':>8} {'fused ms':>9} {'flash ms':>9} {'flash/fused':>11} {'SDPA ms':>8} "
          f"{'fused/SDPA':>10} {'flash/SDPA':>10}", flush=True)
    for slices in map(int, args.slices.split(",")):
        for length in map(int, args.lengths.split(",")):
            gen = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(slices, 1, length, args.dim, generator=gen).requires_grad_() for _ in range(3))
            grad = torch.randn(slices, 1, length, args.dim, generator=gen)
            m_mib = slices * length * length * 4 / 2 ** 20
            kernels = (["flash"] if m_mib > args.max_m_mib else ["fused", "flash"]) + ["sdpa"]
            runs = {name: step(name, q, k, v, grad) for name in kernels}
            times = {name: [] for name in kernels}
            for run in runs.values():
                run()  # warm-up (numba compiled once per process)
            for _ in range(args.reps):
                for name, run in runs.items():
                    t0 = time.perf_counter()
                    run()
                    times[name].append(1e3 * (time.perf_counter() - t0))
            med = {name: round(statistics.median(t), 2) for name, t in times.items()}
            ratio = round(med["flash"] / med["fused"], 3) if "fused" in med else None
            over_sdpa = {f"{name}_over_sdpa": round(med[name] / med["sdpa"], 3) for name in kernels if name != "sdpa"}
            rows.append({"slices": slices, "L": length, "m_mib": round(m_mib, 2), "ms": med, "flash_over_fused": ratio,
                         **over_sdpa})
            print(f"{slices:>6} {length:>5} {m_mib:>8.1f} {med.get('fused', float('nan')):>9.1f} {med['flash']:>9.1f} "
                  f"{ratio if ratio is not None else '-':>11} {med['sdpa']:>8.1f} "
                  f"{over_sdpa.get('fused_over_sdpa', '-'):>10} {over_sdpa['flash_over_sdpa']:>10}", flush=True)
            if args.json:
                args.json.write_text(json.dumps({
                    "command": " ".join(["python scripts/bench_crossover.py", *(argv or sys.argv[1:])]),
                    "commit": commit, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
