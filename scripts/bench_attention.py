"""Forward+backward time and peak memory of CoDA vs softmax attention (docs/attention.md has the numbers).

Shapes: Transformer self-attention per head (B=32, H=8, L=64/128/256, dk=64): SDPA (``SoftmaxScoring``) vs
``CoDAScoring`` with kernel ``auto`` ("coda": Flash-CoDA where it runs), ``fused`` ("coda-fused": M stored, one numba
pass), ``numba`` (plain PyTorch
composition on the numba L1 kernel, "coda-plain"), ``chunked`` (the chunked plain-PyTorch L1 backward,
"coda-chunked") and ``torch`` (torch.cdist's autograd, "coda-cdist"); kernels that cannot run on the device fall
back as ``dispatch.select_kernel`` says (on CUDA "coda" self-attention runs the Triton Flash-CoDA, "coda-plain"
``chunked``). ``CODA_KERNEL`` would override every row, so it is cleared here. The GPU benchmark proper (Flash-CoDA
vs SDPA vs the materialising path over L 512 ... 16384, per-kernel times, the fraction of the L1 floor, training
steps) is ``scripts/bench_gpu_coda.py``; ``--device cuda`` here runs this table's small shapes on the GPU.
DecompAtt cross-attention (B=64, la=lb=40, d=200, no projections): softmax both ways + pooling vs
``coda_matrix`` + ``compositional_pool``.

Time: median of ``--reps`` fwd+bwd runs after 2 warm-up runs. Peak memory: on CUDA ``max_memory_allocated`` minus
what was allocated before the call; on CPU the growth of the peak resident set (VmHWM, reset just before the
call) over the resident set before it, during one fwd+bwd run in a fresh subprocess, after the inputs exist and
kernels are loaded: every temporary the call needs, including the gradients it allocates.

Timed runs of the implementations of one shape are interleaved (rep 1 of each, rep 2 of each, ...), so a drift
in the machine's speed hits numerator and denominator of a ratio alike.

OpenMP wait policy (``--omp-policy``; it must be fixed before torch loads, so each policy runs in its own
subprocess): PASSIVE (idle workers sleep) is what train.py, the Makefile and the tests use, because with spinning
workers a machine whose cores are also busy with other work slowed steps 20-600x; ACTIVE (spinning) is faster on a
dedicated machine (thread wake-ups cost every small op). ``both`` (what ``make bench`` runs) prints the table
under each and a summary of the ratios side by side.

    python scripts/bench_attention.py [--quick] [--device cpu|cuda|all] [--json OUT] [--reps N]
                                      [--omp-policy PASSIVE|ACTIVE|both]
    python scripts/bench_attention.py --sweep [--lengths 128,...,4096] [--json OUT]   # Flash-CoDA vs SDPA over L
    python scripts/bench_attention.py --train-step [--json OUT]   # a transformer_base-sized training step

``--sweep``: (B 4, H 8, d 64) self-attention at L = 128 ... 4096, fwd+bwd time and peak-RSS growth of SDPA,
Flash-CoDA and the fused kernel (up to L = 1024: it stores M and two derivatives), ratios to SDPA side by side.
``--train-step``: one fwd+bwd+Adam step of a 6+6-layer d 512 CoDA-Transformer on IWSLT-like batches (16 x 40),
Flash-CoDA vs the fused kernel vs softmax. With ``--json`` these write the rows plus the commit, date and load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# torch's and numba's OpenMP runtimes are separate; with spinning idle workers (the default) each pool steals the
# cores from the other, which on a loaded 2-core machine made every row (SDPA included) up to 20x slower. Passive
# waiting must be chosen before torch loads its runtime (docs/attention.md, "Thread pools").
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if not os.environ["OMP_WAIT_POLICY"]:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import torch

from coda_exp.attention import (
    KERNEL_ENV_VAR,
    CoDAScoring,
    SoftmaxScoring,
    coda_matrix,
    compositional_pool,
    masked_softmax,
)
from coda_exp.attention.attend import run_coda_cross_attention
from coda_exp.attention.kernels.l1 import HAVE_NUMBA
from coda_exp.attention.options import CoDAOptions

os.environ.pop(KERNEL_ENV_VAR, None)  # each row names its kernel

BASELINE = {"transformer": "sdpa", "decompatt": "softmax"}


def configs(quick: bool) -> list[dict]:
    lengths = [128] if quick else [64, 128, 256]
    out = [{"kind": "transformer", "B": 32, "H": 8, "L": length, "d": 64} for length in lengths]
    return out + [{"kind": "decompatt", "B": 64, "H": 1, "L": 40, "d": 200}]


def impls(kind: str) -> list[str]:
    return ["sdpa" if kind == "transformer" else "softmax", "coda", "coda-fused", "coda-plain", "coda-chunked",
            "coda-cdist"]


KERNEL = {"coda": "auto", "coda-flash": "flash", "coda-fused": "fused", "coda-plain": "numba",
          "coda-chunked": "chunked", "coda-cdist": "torch"}


def make_step(cfg: dict, impl: str, device: str):
    """Inputs for ``cfg`` and a closure running one forward+backward of ``impl``, backpropagating a dense random
    gradient as a loss does in training (``out.sum()``'s stride-0 gradient slows the materialising kernels' M V
    backward ~2x, SDPA's and Flash-CoDA's not)."""
    gen = torch.Generator().manual_seed(0)
    if cfg["kind"] == "transformer":
        shape = (cfg["B"], cfg["H"], cfg["L"], cfg["d"])
        q, k, v, grad = (torch.randn(shape, generator=gen).to(device) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        scoring = SoftmaxScoring() if impl == "sdpa" else CoDAScoring(kernel=KERNEL[impl])

        def step():
            out, _ = scoring(q, k, v)
            out.backward(grad)
        return step
    a, b, grad_a, grad_b = (torch.randn(cfg["B"], cfg["L"], cfg["d"], generator=gen).to(device) for _ in range(4))
    a, b = a.requires_grad_(), b.requires_grad_()

    def step():
        if impl == "softmax":
            scores = a @ b.transpose(1, 2)  # (B, la, lb)
            a2 = masked_softmax(scores, None, dim=-1) @ b
            b2 = masked_softmax(scores, None, dim=-2).transpose(1, 2) @ a
        elif KERNEL[impl] in ("auto", "flash"):  # what CoDACrossAttention runs without maps (flash: two calls)
            a2, b2, _ = run_coda_cross_attention(a, b, a, b, a, b, CoDAOptions(kernel=KERNEL[impl]))
        else:
            m = coda_matrix(a, b, a, b, kernel=KERNEL[impl], scale=True)  # as the module scales
            a2, b2 = compositional_pool(m, a, b)
        torch.autograd.backward([a2, b2], [grad_a, grad_b])
    return step


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_ms(steps: dict, device: str, reps: int, warmups: int = 2) -> dict[str, float]:
    """Median fwd+bwd ms of each step after ``warmups`` warm-ups, the timed runs interleaved across the steps."""
    for step in steps.values():
        for _ in range(warmups):
            step()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            sync(device)
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


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


def _shape(cfg: dict) -> str:
    if cfg["kind"] == "transformer":
        return f"B={cfg['B']} H={cfg['H']} L={cfg['L']} d={cfg['d']}"
    return f"DecompAtt B={cfg['B']} L={cfg['L']} d={cfg['d']}"


def run_all(args) -> list[dict]:
    reps = args.reps or (3 if args.quick else 7)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    rows = []
    header = f"{'device':6} {'shape':28} {'impl':12} {'fwd+bwd ms':>11} {'x base':>7} {'peak MB':>9} {'x base':>7}"
    kernels = "numba fused CoDA + numba L1 kernels" if HAVE_NUMBA else "numba missing: coda = coda-plain = cdist"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {kernels}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, load average {load}\n{header}\n{'-' * len(header)}",
          flush=True)
    for device in devices:
        for cfg in configs(args.quick):
            names = impls(cfg["kind"])
            ms = time_ms({impl: make_step(cfg, impl, device) for impl in names}, device, reps)
            base_ms, base_mb = ms[BASELINE[cfg["kind"]]], None
            for impl in names:
                mb = peak_mb(cfg, impl, device)
                base_mb = mb if impl == BASELINE[cfg["kind"]] else base_mb
                row = dict(device=device, **cfg, impl=impl, ms=ms[impl], peak_mb=mb,
                           omp_wait_policy=os.environ["OMP_WAIT_POLICY"], time_ratio=ms[impl] / base_ms,
                           mem_ratio=mb / base_mb if base_mb > 0 else float("nan"))
                rows.append(row)
                print(f"{device:6} {_shape(cfg):28} {impl:12} {ms[impl]:11.1f} {row['time_ratio']:7.2f} {mb:9.1f} "
                      f"{row['mem_ratio']:7.2f}", flush=True)
    return rows


def run_policies(args, policies: list[str]) -> list[dict]:
    """Each policy in a fresh subprocess (libgomp reads OMP_WAIT_POLICY once, when torch loads it)."""
    rows = []
    forwarded = ["--device", args.device] + (["--quick"] if args.quick else []) + (
        ["--reps", str(args.reps)] if args.reps else [])
    with tempfile.TemporaryDirectory() as tmp:
        for policy in policies:
            out = Path(tmp) / f"{policy}.json"
            env = dict(os.environ, OMP_WAIT_POLICY=policy)
            res = subprocess.run([sys.executable, __file__, *forwarded, "--omp-policy", policy, "--json", str(out)],
                                 check=False, env=env)
            if res.returncode != 0 or not out.exists():  # keep the other policy's rows
                print(f"bench under OMP_WAIT_POLICY={policy} failed (exit {res.returncode}); its rows are missing",
                      file=sys.stderr)
                continue
            rows += json.loads(out.read_text())["rows"]  # the child's record: its rows under "rows"
            print()
    print("CoDA (fused) time / softmax time, each measured side by side within one policy's run:")
    print(f"{'device':6} {'shape':28} " + " ".join(f"{p:>8}" for p in policies))
    keys = list(dict.fromkeys((r["device"], _shape(r)) for r in rows if r["impl"] == "coda"))
    for device, shape in keys:
        ratios = [next((f"{r['time_ratio']:7.2f}x" for r in rows if r["impl"] == "coda" and r["device"] == device
                        and _shape(r) == shape and r["omp_wait_policy"] == p), "       -") for p in policies]
        print(f"{device:6} {shape:28} " + " ".join(ratios))
    return rows


SWEEP_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
SWEEP_IMPLS = ("sdpa", "coda-flash", "coda-fused")
FUSED_MAX_L = 1024  # the fused kernel keeps M and two local derivatives: at L = 2048, 3 x 0.5 GB (B 4, H 8)


def run_sweep(args) -> list[dict]:
    """Flash-CoDA vs SDPA (and today's fused kernel up to FUSED_MAX_L) over L, (B 4, H 8, d 64), CPU."""
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else list(SWEEP_LENGTHS)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, OMP_WAIT_POLICY="
          f"{os.environ['OMP_WAIT_POLICY']}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    header = f"{'L':>5} {'impl':11} {'fwd+bwd ms':>11} {'x sdpa':>7} {'peak MB':>9} {'x sdpa':>7} {'L x L MB':>9}"
    print(f"{header}\n{'-' * len(header)}", flush=True)
    rows = []
    for length in lengths:
        cfg = {"kind": "transformer", "B": 4, "H": 8, "L": length, "d": 64}
        names = [n for n in SWEEP_IMPLS if n != "coda-fused" or length <= FUSED_MAX_L]
        big = length >= 2048
        ms = time_ms({n: make_step(cfg, n, "cpu") for n in names}, "cpu", reps=1 if big else (args.reps or 3),
                     warmups=1)
        matrix_mb = 4 * 8 * length * length * 4 / 2**20  # one float32 (B, H, L, L) tensor
        base_mb = None
        for name in names:
            mb = peak_mb(cfg, name, "cpu")
            base_mb = mb if name == "sdpa" else base_mb
            row = dict(device="cpu", **cfg, impl=name, ms=ms[name], peak_mb=mb, time_ratio=ms[name] / ms["sdpa"],
                       mem_ratio=mb / base_mb if base_mb else float("nan"), matrix_mb=matrix_mb,
                       omp_wait_policy=os.environ["OMP_WAIT_POLICY"])
            rows.append(row)
            print(f"{length:5d} {name:11} {ms[name]:11.1f} {row['time_ratio']:7.2f} {mb:9.1f} {row['mem_ratio']:7.2f} "
                  f"{matrix_mb:9.1f}", flush=True)
    return rows


def run_train_step(args) -> list[dict]:
    """One CoDA-Transformer training step (fwd, bwd, Adam) on IWSLT-like shapes, Flash-CoDA vs fused vs softmax:
    transformer_base sizes (6 + 6 layers, d 512, 8 heads, d_ff 2048, dropouts 0.1), 8000-token vocabularies,
    a batch of 16 x 40 source / 40 target tokens with padding."""
    import functools

    from coda_exp.models import TransformerSeq2Seq

    gen = torch.Generator().manual_seed(0)
    batch, length, vocab = 16, 40, 8000
    src = torch.randint(3, vocab, (batch, length), generator=gen)
    tgt = torch.randint(3, vocab, (batch, length + 1), generator=gen)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
    mask = torch.arange(length)[None] < lengths[:, None]
    src = src.masked_fill(~mask, 0)
    scorings = {"softmax": SoftmaxScoring, "coda-flash": functools.partial(CoDAScoring, kernel="flash"),
                "coda-fused": functools.partial(CoDAScoring, kernel="fused")}
    steps = {}
    for name, scoring in scorings.items():
        torch.manual_seed(0)
        model = TransformerSeq2Seq(vocab, vocab, scoring, d_model=512, num_layers=6, num_heads=8, d_ff=2048)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt):
            opt.zero_grad()
            logits = model(src, mask, tgt[:, :-1], mask)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tgt[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
        steps[name] = step
    ms = time_ms(steps, "cpu", args.reps or 3, warmups=1)
    print(f"training step, transformer_base sizes, batch {batch} x {length} tokens (median of {args.reps or 3}):")
    rows = []
    for name, value in ms.items():
        rows.append({"impl": name, "train_step_ms": value, "time_ratio": value / ms["softmax"]})
        print(f"  {name:11} {value:9.1f} ms   x softmax {value / ms['softmax']:5.2f}   "
              f"x coda-fused {value / ms['coda-fused']:5.2f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="L=128 and the DecompAtt shape only, 3 reps")
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    parser.add_argument("--reps", type=int, default=None, help="timed runs per measurement (default 7, quick 3)")
    parser.add_argument("--json", default=None, help="write the rows to this JSON file")
    parser.add_argument("--omp-policy", default=None, choices=["PASSIVE", "ACTIVE", "both"],
                        help="OpenMP wait policy (default: $OMP_WAIT_POLICY, else PASSIVE); both: one run each")
    parser.add_argument("--sweep", action="store_true",
                        help="Flash-CoDA vs SDPA (and fused up to L=1024) over L=128..4096 at (B 4, H 8, d 64)")
    parser.add_argument("--lengths", default=None, help="comma-separated lengths for --sweep")
    parser.add_argument("--train-step", action="store_true",
                        help="one training step of a transformer_base-sized CoDA-Transformer: flash vs fused vs softmax")
    parser.add_argument("--_probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._probe:
        _probe(args._probe)
        return
    from coda_exp.results import git_commit

    meta = {"command": " ".join(["python scripts/bench_attention.py", *sys.argv[1:]]),
            "git_commit": git_commit(Path(__file__).resolve().parents[1]), "date": time.strftime("%Y-%m-%d %H:%M"),
            "threads": torch.get_num_threads(), "load_average_start": os.getloadavg()}
    if args.sweep or args.train_step:
        rows = (run_sweep(args) if args.sweep else []) + (run_train_step(args) if args.train_step else [])
        if args.json:
            meta["load_average_end"] = os.getloadavg()
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=2))
        return
    wanted = args.omp_policy or os.environ["OMP_WAIT_POLICY"]
    if wanted == "both" or wanted.upper() != os.environ["OMP_WAIT_POLICY"].upper():
        rows = run_policies(args, ["PASSIVE", "ACTIVE"] if wanted == "both" else [wanted])
    else:
        rows = run_all(args)
    if args.json:  # the rows with what made them (commit, command, threads, load), as --sweep writes
        meta["load_average_end"] = os.getloadavg()
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
