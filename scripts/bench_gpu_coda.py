#!/usr/bin/env python
"""Flash-CoDA on a GPU, in one run (issue 22): correctness against float64, then time side by side.

    python scripts/bench_gpu_coda.py [--device cuda] [--lengths 512,1024,...,16384] [--tokens 16384] [--heads 16]
                                     [--dim 64] [--dtypes float32,bfloat16] [--impls sdpa,flash,chunked]
                                     [--threads N] [--time-budget-s 300] [--json OUT]

1. **Check**: Flash-CoDA (``kernel=flash``) forward and gradients against the materialising reference in float64
   (``kernel=torch`` on the CPU), for each dtype, with key padding, causal, unshared N inputs; the relative L2
   error must stay under the dtype's tolerance (float32 1e-3 for TF32, bfloat16 3e-2); NaN never passes.
2. **Time**, at B·L = ``--tokens`` (B = tokens / L), H = ``--heads``, d = ``--dim``, for each L, dtype and causal
   flag: fwd and fwd+bwd of Flash-CoDA, SDPA and (while M fits ``--max-m-gib``) the materialising path
   (``kernel=chunked``); medians of ``--reps`` CUDA-event timings after warm-up; the ratio to SDPA; the fraction of
   the L1 floor (2 FP32 instructions per pair and feature: ``--fp32-tops`` instructions/s, 33.5e12 for an H100/H200:
   132 SMs x 128 lanes x 1.98 GHz; issue 22's yardstick: 16-bit inputs' distances, summed in packed float16 since
   ``triton_args._l1_args``, take about one instruction per pair and feature, so their fraction may pass 100 %);
   peak memory over the inputs. ``--impls`` picks the columns: ``sdpa``, any
   ``coda_attention`` kernel (``flash``, ``chunked``, ``fused``, ...) and the peer ``keops``
   (``coda_exp.peers.keops_coda``, ``pip install 'coda-exp[keops]'``), float32/float64 rows only (KeOps has no
   bfloat16). KeOps first runs in a child process (fwd+bwd at d = ``--dim``, compiling its formulas into
   ``KEOPS_CACHE_FOLDER``): its code generation once ended a process on a GPU machine without a word, so a probe
   that fails is recorded (``peers.keops``: exit status, output tail) and the keops rows are skipped, not the
   run. Its float64 check and each row catch any error into the JSON; each row spends at most
   ``--keops-budget-s`` (the first call compiles, then reps are cut to fit).
3. **Per kernel** (``--profile-length``): the CUDA kernels of one Flash-CoDA fwd+bwd by self time (torch.profiler).
4. **Training steps** (``--train-steps``, all by default on CUDA): Transformer vs CoDA-Transformer (kernel
   ``auto``), forward + backward + Adam, per dtype (16-bit under autocast, as ``bf16-mixed`` trains): MLU's
   transformer_tiny batch (192 pairs), transformer_base at 64 x 50 and 4 x 1024 tokens; the kernels CoDA ran.

Every measurement goes into the JSON as soon as it is made (the device, versions and commit first), so a run cut
short by ``--time-budget-s`` or a time limit keeps what it measured. On a CPU it runs at whatever sizes you give
(the tests use tiny ones) with wall-clock timing and the numba Flash-CoDA; the floor then means nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.pop("CODA_KERNEL", None)

import torch
import torch.nn.functional as F

from coda_exp.attention import coda_attention
from coda_exp.attention.kernels import flash_triton
from coda_exp.results import benchmark_environment

sys.path.insert(0, str(ROOT / "scripts"))
from peer_keops import (  # a sibling: the KeOps peer
    PEER_DTYPES,
    PEERS,
    keops_environment,
    keops_probe,
    time_peer,
)

TOL = {torch.float32: 1e-3, torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float64: 1e-10}


def inputs(b, h, lq, lk, d, dtype, device, seed=0, grad=True):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=gen, dtype=torch.float64) for n in (lq, lk, lk))
    return [t.to(device, dtype).requires_grad_(grad) for t in (q, k, v)]


def attention_fn(impl: str):
    """The op of ``impl``: a ``coda_attention`` kernel, or the peer ``keops``."""
    if impl == "keops":
        from coda_exp.peers.keops_coda import keops_coda_attention
        return keops_coda_attention

    def run(*args, **kwargs):
        return coda_attention(*args, kernel=impl, **kwargs)
    return run


def check(device: str, dtype: torch.dtype, impl: str = "flash") -> dict:
    """``impl`` (Flash-CoDA, or the peer ``keops``) on ``device`` in ``dtype`` against float64 on the CPU: key
    padding, causal, unshared N. The reference sees the inputs rounded to ``dtype`` (as the kernel does): near-ties
    of nq - nk flip sign otherwise."""
    b, h, lq, lk, d = 2, 3, 70, 90, 32
    ref = [t.detach().to(dtype).double().requires_grad_() for t in inputs(b, h, lq, lk, d, torch.float64, "cpu")]
    gen = torch.Generator().manual_seed(1)
    nq, nk = (torch.randn(b, h, n, 8, generator=gen, dtype=torch.float64).to(dtype).double().requires_grad_()
              for n in (lq, lk))
    key = torch.rand(b, 1, 1, lk, generator=gen) > 0.25
    want = coda_attention(*ref, kernel="torch", mask=key, causal=True, n_q=nq, n_k=nk, alpha=0.7, beta=0.4)
    dout = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    want_grads = torch.autograd.grad(want, [*ref, nq, nk], dout)
    leaves = [t.detach().to(device, dtype).requires_grad_() for t in (*ref, nq, nk)]
    got = attention_fn(impl)(*leaves[:3], mask=key.to(device), causal=True, n_q=leaves[3], n_k=leaves[4],
                             alpha=0.7, beta=0.4)
    grads = torch.autograd.grad(got, leaves, dout.to(device, dtype))
    errors = [float((g.detach().double().cpu() - w.detach()).norm() / w.detach().norm())
              for g, w in zip((got, *grads), (want, *want_grads))]
    worst = max(errors) if all(math.isfinite(e) for e in errors) else float("nan")
    return {"impl": impl, "dtype": str(dtype), "max_rel_err": worst, "ok": worst < TOL[dtype]}


def autotuned(module) -> dict[str, dict]:
    """Per autotuned kernel of ``module`` (``flash_triton._TUNED``): the config its last call ran and, where
    autotune timed (or read from its disk cache) every config for that call's key, each config's time in ms."""
    chosen = {}
    for name, tuner in getattr(module, "_TUNED", {}).items():
        best = getattr(tuner, "best_config", None)
        if best is None:
            continue
        timings = getattr(tuner, "configs_timings", None) or {}
        chosen[name] = {"best": str(best), "timings_ms": {
            str(config): [round(float(t), 4) for t in (times if isinstance(times, (list, tuple)) else [times])]
            for config, times in timings.items()}}
    return chosen


def timer(device: str):
    def measure(fn, reps: int, warmup: int = 3) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)
    return measure


def ops(kind: str, q, k, v, causal: bool):
    """(forward, forward + backward) closures of one attention implementation."""
    if kind == "sdpa":
        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        attend = attention_fn(kind)

        def fwd():
            return attend(q, k, v, causal=causal)

    def fwd_bwd():
        out = fwd()
        q.grad = k.grad = v.grad = None
        out.backward(torch.ones_like(out))

    def fwd_only():
        with torch.no_grad():
            fwd()
    return fwd_only, fwd_bwd


def peak_mib(device: str, fn) -> float | None:
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)


def profile(device: str, q, k, v) -> list[dict]:
    """The CUDA kernels of one Flash-CoDA fwd+bwd by self time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    _, fwd_bwd = ops("flash", q, k, v, False)
    fwd_bwd()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        fwd_bwd()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:8]
    return [{"name": e.key[:80], "ms": round(e.self_device_time_total / 1e3 / max(e.count, 1), 3), "count": e.count}
            for e in rows]


# training steps: (model sizes, batch, source length, target length, vocabulary), the TransformerSeq2Seq defaults
# being transformer_tiny's; MLU's batch of 192 pairs of ~21 / ~10 characters; transformer_base at 50 and 1024 tokens
TRAIN_SHAPES = {
    "mlu_tiny": ({}, 192, 21, 10, 32),
    "base_50": ({"d_model": 512, "num_layers": 6, "num_heads": 8, "d_ff": 2048}, 64, 50, 50, 8000),
    "base_1024": ({"d_model": 512, "num_layers": 6, "num_heads": 8, "d_ff": 2048}, 4, 1024, 1024, 8000),
}


def train_step_rows(device: str, shape: str, measure, reps: int, dtype: torch.dtype, shrink: int = 1,
                    kernels: tuple[str, ...] = ("auto",)) -> list[dict]:
    """Transformer vs CoDA-Transformer (one row per CoDA kernel in ``kernels``, ``auto`` first): median ms of one
    training step (forward, backward, Adam) at ``TRAIN_SHAPES[shape]`` (batch divided by ``shrink``, for tests),
    under autocast to ``dtype`` when it is 16-bit (what ``trainer.precision=bf16-mixed`` does), and the kernels CoDA
    ran."""
    import functools

    from coda_exp.attention import CoDAScoring, SoftmaxScoring, kernels_used
    from coda_exp.models import TransformerSeq2Seq

    sizes, batch, src_len, tgt_len, vocab = TRAIN_SHAPES[shape]
    batch = max(1, batch // shrink)
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab, (batch, src_len), generator=gen).to(device)
    tgt = torch.randint(3, vocab, (batch, tgt_len + 1), generator=gen).to(device)
    src_mask = (torch.arange(src_len)[None] < torch.randint(src_len // 2, src_len + 1, (batch, 1), generator=gen))
    src_mask, tgt_mask = src_mask.to(device), torch.ones(batch, tgt_len, dtype=torch.bool, device=device)
    rows = []
    models = [("transformer", SoftmaxScoring, None)]
    models += [("coda_transformer", functools.partial(CoDAScoring, kernel=kernel), kernel) for kernel in kernels]
    for name, scoring, kernel in models:
        torch.manual_seed(0)
        model = TransformerSeq2Seq(vocab, vocab, scoring, max_len=max(src_len, tgt_len) + 2, **sizes).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=dtype, enabled=dtype in (torch.float16, torch.bfloat16)):
                logits = model(src, src_mask, tgt[:, :-1], tgt_mask)
                loss = F.cross_entropy(logits.float().reshape(-1, vocab), tgt[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
        row = {"shape": shape, "batch": batch, "src_len": src_len, "tgt_len": tgt_len, "dtype": str(dtype),
               "model": name, "kernel": kernel}
        try:
            row["step_ms"] = round(measure(step, reps, warmup=2), 3)
            row["kernels"] = sorted(set(kernels_used(model))) if name == "coda_transformer" else []
        except Exception as err:  # noqa: BLE001 - a failure is a result too
            row["error"] = f"{type(err).__name__}: {err}"[:300]
        rows.append(row)
        del model, opt
    for row in rows[1:]:
        if "step_ms" in row and "step_ms" in rows[0]:
            row["over_transformer"] = round(row["step_ms"] / rows[0]["step_ms"], 2)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lengths", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--tokens", type=int, default=16384, help="B x L, fixed across lengths")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--causal", default="0,1")
    parser.add_argument("--impls", default="sdpa,flash,chunked",
                        help="columns: sdpa, coda_attention kernels (flash, chunked, fused, ...), the peer keops")
    parser.add_argument("--keops-budget-s", type=float, default=120.0, help="seconds per keops row, compiling included")
    parser.add_argument("--threads", type=int, default=None, help="torch and numba threads (OMP_NUM_THREADS: KeOps')")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--max-m-gib", type=float, default=8.0, help="the materialising path only while M fits")
    parser.add_argument("--fp32-tops", type=float, default=33.5, help="FP32 instructions per second, in 1e12")
    parser.add_argument("--profile-length", type=int, default=4096, help="0: no profile")
    parser.add_argument("--train-steps", default=None,
                        help=f"training-step shapes among {','.join(TRAIN_SHAPES)} (default: all on cuda, none on cpu)")
    parser.add_argument("--train-kernels", default="auto",
                        help="CoDA kernels of the training steps, one row each (auto,chunked: CUDA's crossover)")
    parser.add_argument("--train-shrink", type=int, default=1, help="divide the training batches by this (tests)")
    parser.add_argument("--time-budget-s", type=float, default=1e9)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    start, device = time.time(), args.device
    dtypes = [getattr(torch, name) for name in args.dtypes.split(",")]
    impls = args.impls.split(",")
    if args.threads:
        torch.set_num_threads(args.threads)
        import numba
        numba.set_num_threads(args.threads)
    env = {**benchmark_environment(), "device": device, "threads_arg": args.threads,
           **{name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")},
           "loadavg": [round(x, 2) for x in os.getloadavg()]}
    try:
        import numba
        env.update(numba=numba.__version__, numba_threads=numba.get_num_threads())
    except ImportError:
        env["numba"] = None
    out = {"environment": env, "args": vars(args) | {"json": str(args.json)},
           "check": [], "rows": [], "profile": None, "train_steps": [], "skipped": [], "peers": {}}

    def save():
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=1, default=str))

    for dtype in dtypes:
        out["check"].append(check(device, dtype))
        print("check", out["check"][-1], flush=True)
        save()
    broken = {}  # peer -> why its rows are skipped
    if "keops" in impls:
        peer = out["peers"]["keops"] = {"environment": keops_environment()}
        save()
        probe_dtype = next((d for d in dtypes if d in PEER_DTYPES["keops"]), torch.float32)
        peer["probe"] = keops_probe(device, args.dim, probe_dtype, max(30.0, min(600.0, args.time_budget_s)))
        print("keops probe", {k: v for k, v in peer["probe"].items() if k != "tail"}, flush=True)
        if not peer["probe"]["ok"]:
            broken["keops"] = f"probe failed (exit {peer['probe']['rc']}): see peers.keops.probe.tail"
            print(peer["probe"]["tail"][-1500:], flush=True)
        else:
            peer["check"] = []
            for dtype in (d for d in dtypes if d in PEER_DTYPES["keops"]):
                try:
                    peer["check"].append(check(device, dtype, "keops"))
                except Exception as err:  # noqa: BLE001 - a failure is a result too
                    peer["check"].append({"impl": "keops", "dtype": str(dtype), "error": f"{type(err).__name__}: {err}"[:2000]})
                print("check", peer["check"][-1], flush=True)
        save()
    measure = timer(device)
    print(f"{'L':>6} {'dtype':>9} {'causal':>6} {'impl':>8} {'fwd ms':>9} {'fwd+bwd':>9} {'x SDPA':>7} {'floor %':>7}",
          flush=True)
    for length in map(int, args.lengths.split(",")):
        batch = max(1, args.tokens // length)
        for dtype in dtypes:
            for causal in (bool(int(c)) for c in args.causal.split(",")):
                q, k, v = inputs(batch, args.heads, length, length, args.dim, dtype, device)
                m_gib = batch * args.heads * length * length * 4 / 2**30
                pairs = batch * args.heads * length * length * (0.5 if causal else 1.0)
                floor_ms = 2 * pairs * args.dim / (args.fp32_tops * 1e12) * 1e3
                base = None
                for impl in impls:
                    if time.time() - start > args.time_budget_s:
                        out["skipped"].append(f"L{length} {dtype} causal={causal} {impl}: time budget")
                        continue
                    if impl == "chunked" and m_gib > args.max_m_gib:
                        continue
                    if impl in PEERS and (impl in broken or dtype not in PEER_DTYPES[impl]):
                        why = broken.get(impl) or f"{dtype} is not a {impl} dtype"
                        out["skipped"].append(f"L{length} {dtype} causal={causal} {impl}: {why}")
                        continue
                    fwd, fwd_bwd = ops(impl, q, k, v, causal)
                    row = {"L": length, "B": batch, "H": args.heads, "d": args.dim, "dtype": str(dtype),
                           "causal": causal, "impl": impl}
                    try:
                        if impl in PEERS:  # slow, compiles on first use: within its own budget
                            budget = min(args.keops_budget_s, args.time_budget_s - (time.time() - start))
                            row.update(time_peer(device, fwd, fwd_bwd, args.reps, budget, measure))
                        else:
                            row.update(fwd_ms=round(measure(fwd, args.reps), 3),
                                       fwd_bwd_ms=round(measure(fwd_bwd, args.reps), 3))
                        row["peak_mib"] = peak_mib(device, fwd_bwd)
                    except Exception as err:  # noqa: BLE001 - a failure is a result too
                        row["error"] = f"{type(err).__name__}: {err}"[:2000 if impl in PEERS else 300]
                    if impl == "flash" and device == "cuda":  # the configs autotune chose and timed
                        row["autotune"] = autotuned(flash_triton)
                    if impl == "sdpa":
                        base = row.get("fwd_bwd_ms")
                    if impl != "sdpa" and "fwd_ms" in row:
                        row["fwd_floor_fraction"] = float(f"{floor_ms / row['fwd_ms']:.4g}")
                    if impl != "sdpa" and "fwd_bwd_ms" in row:
                        row["fwd_bwd_over_sdpa"] = round(row["fwd_bwd_ms"] / base, 2) if base else None
                    out["rows"].append(row)
                    save()
                    print(f"{length:>6} {str(dtype)[6:]:>9} {causal!s:>6} {impl:>8} {row.get('fwd_ms', 'err'):>9} "
                          f"{row.get('fwd_bwd_ms', 'err'):>9} {row.get('fwd_bwd_over_sdpa') or '':>7} "
                          f"{100 * row['fwd_floor_fraction'] if 'fwd_floor_fraction' in row else '':>7}", flush=True)
                del q, k, v
    save()
    if device == "cuda" and args.profile_length and time.time() - start < args.time_budget_s:
        batch = max(1, args.tokens // args.profile_length)
        out["profile"] = profile(device, *inputs(batch, args.heads, args.profile_length, args.profile_length,
                                                 args.dim, torch.bfloat16, device))
        print("profile", out["profile"], flush=True)
        save()
    shapes = args.train_steps if args.train_steps is not None else (",".join(TRAIN_SHAPES) if device == "cuda" else "")
    for shape in filter(None, shapes.split(",")):
        for dtype in dtypes:
            if time.time() - start > args.time_budget_s:
                out["skipped"].append(f"train step {shape} {dtype}: time budget")
                continue
            rows = train_step_rows(device, shape, measure, args.reps, dtype, args.train_shrink,
                                   tuple(args.train_kernels.split(",")))
            out["train_steps"] += rows
            save()
            for row in rows:
                print(f"train step {shape:9} {str(dtype)[6:]:>9} {row['model']:16} {row['kernel'] or '':8} {row.get('step_ms', 'err'):>9} ms "
                      f"{row.get('over_transformer') or ''} {row.get('kernels') or row.get('error', '')}", flush=True)
    save()
    return 0 if all(c["ok"] for c in out["check"]) else 1


if __name__ == "__main__":
    sys.exit(main())
