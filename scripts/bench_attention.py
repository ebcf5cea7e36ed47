"""Forward+backward time and peak memory of CoDA vs softmax attention (docs/attention.md has the numbers).

Shapes: Transformer self-attention per head (B=32, H=8, L=64/128/256, dk=64): SDPA (``SoftmaxScoring``) vs
``CoDAScoring`` with the fused numba kernel ("coda", the default), with the plain PyTorch composition on the numba
L1 kernel ("coda-plain", ``CODA_FUSED=0``) and with torch.cdist's autograd ("coda-cdist", all PyTorch).
DecompAtt cross-attention (B=64, la=lb=40, d=200, no projections): softmax both ways + pooling vs
``coda_matrix`` + ``compositional_pool``.

Time: median of ``--reps`` fwd+bwd runs after 2 warm-up runs. Peak memory: on CUDA ``max_memory_allocated`` minus
what was allocated before the call; on CPU the growth of the peak resident set (VmHWM, reset just before the
call) over the resident set before it, during one fwd+bwd run in a fresh subprocess, after the inputs exist and
kernels are loaded: every temporary the call needs, including the gradients it allocates.

    python scripts/bench_attention.py [--quick] [--device cpu|cuda|all] [--json OUT] [--reps N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# torch's and numba's OpenMP runtimes are separate; with spinning idle workers (the default) each pool steals the
# cores from the other, which on a loaded 2-core machine made every row (SDPA included) up to 20x slower. Passive
# waiting must be chosen before torch loads its runtime (docs/attention.md, "Thread pools").
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from coda_exp.attention import CoDAScoring, SoftmaxScoring, coda_matrix, compositional_pool, masked_softmax
from coda_exp.attention.fused import ENV_VAR as FUSED_ENV
from coda_exp.attention.l1 import HAVE_NUMBA

BASELINE = {"transformer": "sdpa", "decompatt": "softmax"}


def configs(quick: bool) -> list[dict]:
    lengths = [128] if quick else [64, 128, 256]
    out = [{"kind": "transformer", "B": 32, "H": 8, "L": length, "d": 64} for length in lengths]
    return out + [{"kind": "decompatt", "B": 64, "H": 1, "L": 40, "d": 200}]


def impls(kind: str) -> list[str]:
    return ["sdpa" if kind == "transformer" else "softmax", "coda", "coda-plain", "coda-cdist"]


@contextlib.contextmanager
def fused_env(impl: str):
    """CODA_FUSED=0 for "coda-plain" (plain PyTorch composition on the numba L1 kernel), unchanged otherwise."""
    old = os.environ.get(FUSED_ENV)
    if impl == "coda-plain":
        os.environ[FUSED_ENV] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(FUSED_ENV, None)
        else:
            os.environ[FUSED_ENV] = old


def make_step(cfg: dict, impl: str, device: str):
    """Inputs for ``cfg`` and a closure running one forward+backward of ``impl``."""
    gen = torch.Generator().manual_seed(0)
    if cfg["kind"] == "transformer":
        shape = (cfg["B"], cfg["H"], cfg["L"], cfg["d"])
        q, k, v = (torch.randn(shape, generator=gen).to(device).requires_grad_() for _ in range(3))
        scoring = {"sdpa": SoftmaxScoring(), "coda": CoDAScoring(), "coda-plain": CoDAScoring(),
                   "coda-cdist": CoDAScoring(l1_backend="torch")}[impl]

        def step():
            with fused_env(impl):
                out, _ = scoring(q, k, v)
            out.sum().backward()
        return step
    a, b = (torch.randn(cfg["B"], cfg["L"], cfg["d"], generator=gen).to(device).requires_grad_() for _ in range(2))

    def step():
        if impl == "softmax":
            scores = a @ b.transpose(1, 2)  # (B, la, lb)
            a2 = masked_softmax(scores, None, dim=-1) @ b
            b2 = masked_softmax(scores, None, dim=-2).transpose(1, 2) @ a
        else:
            with fused_env(impl):
                m = coda_matrix(a, b, a, b, l1_backend="torch" if impl == "coda-cdist" else None)
            a2, b2 = compositional_pool(m, a, b)
        (a2.sum() + b2.sum()).backward()
    return step


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_ms(step, device: str, reps: int) -> float:
    for _ in range(2):
        step()
    sync(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def peak_mb(cfg: dict, impl: str, device: str) -> float:
    if device == "cuda":
        step = make_step(cfg, impl, device)
        step()  # warm-up; grads now allocated, so the measured run counts temporaries only
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    probe = json.dumps({"cfg": cfg, "impl": impl})
    res = subprocess.run([sys.executable, __file__, "--_probe", probe], capture_output=True, text=True,
                         check=True)
    return float(res.stdout.split()[-1])


def _status_kb(field: str) -> int:
    """A field of /proc/self/status in kB (VmRSS: resident now, VmHWM: peak resident since the last reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _probe(spec: str) -> None:
    """Subprocess body: peak-RSS growth (MB) of one fwd+bwd after inputs exist and kernels are loaded.

    The peak is reset first (``echo 5 > /proc/self/clear_refs`` resets VmHWM), so import-time peaks do not hide
    the call's own; without that (non-Linux) it falls back to ``ru_maxrss``, which can only under-report.
    """
    spec = json.loads(spec)
    small = dict(spec["cfg"], B=1, L=8)
    make_step(small, spec["impl"], "cpu")()  # load/compile kernels, start thread pools
    step = make_step(spec["cfg"], spec["impl"], "cpu")
    try:
        Path("/proc/self/clear_refs").write_text("5")
        before = _status_kb("VmRSS")
        step()
        peak = _status_kb("VmHWM")
    except OSError:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        step()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((peak - before) / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="L=128 and the DecompAtt shape only, 3 reps")
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    parser.add_argument("--reps", type=int, default=None, help="timed runs per measurement (default 7, quick 3)")
    parser.add_argument("--json", default=None, help="write the rows to this JSON file")
    parser.add_argument("--_probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._probe:
        _probe(args._probe)
        return
    reps = args.reps or (3 if args.quick else 7)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    rows = []
    header = f"{'device':6} {'shape':28} {'impl':11} {'fwd+bwd ms':>11} {'x base':>7} {'peak MB':>9} {'x base':>7}"
    kernels = "numba fused CoDA + numba L1 kernels" if HAVE_NUMBA else "numba missing: coda = coda-plain = cdist"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {kernels}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}\n{header}\n{'-' * len(header)}")
    for device in devices:
        for cfg in configs(args.quick):
            shape = (f"B={cfg['B']} H={cfg['H']} L={cfg['L']} d={cfg['d']}" if cfg["kind"] == "transformer"
                     else f"DecompAtt B={cfg['B']} L={cfg['L']} d={cfg['d']}")
            base = None
            for impl in impls(cfg["kind"]):
                ms = time_ms(make_step(cfg, impl, device), device, reps)
                mb = peak_mb(cfg, impl, device)
                if impl == BASELINE[cfg["kind"]]:
                    base = (ms, mb)
                row = dict(device=device, **cfg, impl=impl, ms=ms, peak_mb=mb, time_ratio=ms / base[0],
                           mem_ratio=mb / base[1] if base[1] > 0 else float("nan"))
                rows.append(row)
                print(f"{device:6} {shape:28} {impl:11} {ms:11.1f} {row['time_ratio']:7.2f} {mb:9.1f} "
                      f"{row['mem_ratio']:7.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
