#!/usr/bin/env python
"""Flash-CoDA's Triton kernels timed alone on a GPU, against another version of them in the same process.

    python scripts/bench_flash_kernels.py [--lengths 1024,4096,16384] [--dtypes bfloat16,float32]
        [--backwards split,fused] [--baseline DIR] [--time-budget-s 200] [--json OUT]

At B·L = ``--tokens`` (B = tokens / L), H = ``--heads``, d = ``--dim``, shared N (CoDA-Transformer's eq. 10), no
mask: median CUDA-event times of ``flash_triton.forward`` and ``backward`` (the whole backward: the split kernels
``_dkdv_kernel`` + ``_dq_kernel``, or the fused ``_bwd_kernel`` and the casts of its float32 buffers), once per
``--backwards`` (``flash_triton.BACKWARD``; the rows of one dtype and length side by side), each kernel's own
time from torch.profiler, and the fraction of the L1 floor (2 FP32 instructions per pair and feature at
``--fp32-tops`` 1e12 instructions/s: 33.5 for an H100/H200), and the config autotune chose for each kernel with every
config's time (``PF`` 0 vs 1: which one wins; ``--candidates`` adds configs to time beside them, shipped or not). ``--baseline DIR`` also times the kernels of
``DIR/old_flash_triton.py`` (an earlier version, its module importing ``old_triton_jit`` from DIR) on the same
inputs, so a speed-up is measured side by side. Rows go into the JSON as they are measured (device, versions and
commit first); ``--time-budget-s`` stops before a row that would not fit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch

from coda_exp.attention.flash_spec import FlashParams
from coda_exp.attention.kernels import flash_triton
from coda_exp.results import benchmark_environment

sys.path.insert(0, str(ROOT / "scripts"))
from bench_gpu_coda import autotuned, timer  # a sibling script: one CUDA-event timer, one autotune record

_MEASURE = timer("cuda")


def parse_configs(text: str) -> dict[str, list[tuple[int, ...]]]:
    """'kernel:BLOCK_M,BLOCK_N,DC,PF,num_warps,num_stages[,maxnreg];...' -> {kernel: [config, ...]}; an
    argparse error naming the part that is wrong."""
    out: dict[str, list[tuple[int, ...]]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, numbers = part.partition(":")
        try:
            config = tuple(int(x) for x in numbers.split(","))
        except ValueError:
            config = ()
        if name not in flash_triton.CONFIGS or len(config) not in (6, 7):
            raise argparse.ArgumentTypeError(
                f"{part!r}: expected kernel:BLOCK_M,BLOCK_N,DC,PF,num_warps,num_stages[,maxnreg] with kernel one of "
                f"{sorted(flash_triton.CONFIGS)}")
        out.setdefault(name, []).append(config)
    return out


def kernel_ms(fn) -> dict[str, float]:
    """Each CUDA kernel's self time (ms) in one call of ``fn``, by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.key: round(e.self_device_time_total / 1000, 3) for e in prof.key_averages()
            if e.self_device_time_total > 0 and "kernel" in e.key}


def time_version(module, args: tuple, dout, reps: int) -> tuple[float, float, dict[str, float]]:
    """(forward ms, backward ms, each kernel's ms in one forward + backward) of ``module``'s kernels."""

    def fwd():
        return module.forward(*args)

    def bwd():
        return module.backward(*args, dout)

    return _MEASURE(fwd, reps, warmup=2), _MEASURE(bwd, reps, warmup=2), kernel_ms(lambda: (fwd(), bwd()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="1024,4096,16384")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--backwards", default="split,fused", help="flash_triton.BACKWARD values, timed in turn")
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--baseline-lengths", default="4096")
    parser.add_argument("--fp32-tops", type=float, default=33.5)
    parser.add_argument("--time-budget-s", type=float, default=1e9)
    parser.add_argument("--candidates", type=parse_configs, default={},
                        help="configs timed beside flash_triton.CONFIGS by the same autotune, e.g. "
                             "'fwd:64,64,2,1,4,2,128;fwd:32,64,2,1,4,2;bwd:64,64,2,1,4,3' (BLOCK_M, BLOCK_N, DC, PF, "
                             "num_warps, num_stages[, maxnreg]): each one's time is in the row's autotune record")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_flash_kernels: needs a CUDA GPU")
        return 2
    for name, extra in args.candidates.items():  # before the first call builds the autotuned kernels
        flash_triton.CONFIGS[name] = [*flash_triton.CONFIGS[name], *extra]
    # (name, module, its BACKWARD or None: a baseline from before the choice existed runs its own backward)
    versions = [(f"new-{kind}", flash_triton, kind) for kind in args.backwards.split(",")]
    for kind in args.backwards.split(","):
        if kind not in flash_triton.BACKWARDS:
            parser.error(f"--backwards: {kind!r} is not one of {flash_triton.BACKWARDS}")
    if args.baseline is not None:
        sys.path.insert(0, str(args.baseline.resolve()))
        import old_flash_triton

        versions.append(("baseline", old_flash_triton, None))
    record = {"environment": benchmark_environment(), "gpu": torch.cuda.get_device_name(),
              "setting": vars(args) | {"baseline": str(args.baseline)}, "rows": []}

    def save():
        if args.json:
            args.json.write_text(json.dumps(record, indent=1, default=str))

    save()
    start = time.time()
    last_row_s = 0.0
    params = FlashParams(0.125, 0.125, 1.0, "tanh", "tanh", shared_n=True)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for length in (int(x) for x in args.lengths.split(",")):
            for name, module, kind in versions:
                if name == "baseline" and str(length) not in args.baseline_lengths.split(","):
                    continue
                if kind is not None:
                    module.BACKWARD = kind
                if time.time() - start + 2 * last_row_s > args.time_budget_s:
                    print(f"time budget: stopping before {name} {dtype_name} L {length}")
                    save()
                    return 0
                row_start = time.time()
                b = max(1, args.tokens // length)
                gen = torch.Generator(device="cuda").manual_seed(0)
                q, k, v, dout = (torch.randn(b, args.heads, length, args.dim, device="cuda", dtype=dtype,
                                             generator=gen) for _ in range(4))
                fwd_ms, bwd_ms, kernels = time_version(module, (q, k, v, None, None, None, None, params), dout,
                                                       args.reps)
                floor_ms = 2 * b * args.heads * length * length * args.dim / (args.fp32_tops * 1e12) * 1e3
                row = {"version": name, "backward": kind or "baseline", "dtype": dtype_name, "L": length, "B": b, "fwd_ms": round(fwd_ms, 3),
                       "bwd_ms": round(bwd_ms, 3), "bwd_over_fwd": round(bwd_ms / fwd_ms, 2),
                       "floor_ms": round(floor_ms, 3), "fwd_floor_fraction": round(floor_ms / fwd_ms, 3),
                       "kernels_ms": kernels, "autotune": autotuned(module)}
                record["rows"].append(row)
                save()
                last_row_s = time.time() - row_start
                print(f"{name:9s} {dtype_name:8s} L {length:5d}: fwd {fwd_ms:8.2f} ms ({row['fwd_floor_fraction']:.0%} "
                      f"of the floor), bwd {bwd_ms:8.2f} ms ({row['bwd_over_fwd']}x fwd) {row['kernels_ms']} "
                      f"[{last_row_s:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
