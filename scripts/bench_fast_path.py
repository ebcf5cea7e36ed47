#!/usr/bin/env python
"""The fast path's levers, measured side by side in one run: ms per MLU training step, ratios to the plain step.

    python scripts/bench_fast_path.py --device cuda --json results/bench/fast_path.json      (on a GPU: everything)
    python scripts/bench_fast_path.py --device cpu --scale cpu --steps 5 --levers eager static static+fused

For each model (``--models``; T2T tiny at MLU's batch of 192 pairs) and each lever (``--levers``), the same
training step (the task's ``train_loss``, backward, the optimizer, the schedule) runs ``--steps`` times after
``--warmup`` untimed steps (compilation, capture), the device synchronised at both ends:

- ``eager``: the plain loader's batches (padded to each batch's longest pair), foreach Adam, one host read of the
  token count per step (as the plain path's logging does);
- ``static``: batches of one shape (``data.static_shapes``), no host read;
- ``+fused``: the fused Adam kernel; ``+compile``: ``torch.compile`` of the loss (mode ``--compile-mode``);
- ``+graph``: forward + backward captured once in a CUDA graph and replayed (``coda_exp.fast_step.FastStep``);
- ``vmap``: ``--vmap`` seeds of one model trained in one process (``torch.func.stack_module_state`` +
  ``functional_call`` under ``vmap``; one fused Adam over the stacked weights, which is one Adam per seed, Adam
  being elementwise), reported per seed-step; ``vmap+graph``: the same, captured;
- ``lightning-plain`` / ``lightning-fast``: ``trainer.fit`` itself (trainer=gpu / trainer=gpu_fast), the time per
  step between two callbacks, Lightning's own overhead included.

``--parallel P`` then runs P processes of the best single-process lever (or ``--parallel-lever``) side by side for
``--parallel-s`` seconds (NVIDIA MPS if its daemon runs) and reports the aggregate steps per second, beside
``vmap``'s. ``--eval N`` times the test of N pairs (``trainer.test``: teacher-forced metrics and greedy decoding
with the decoder cache, batches of ``fast.eval_batch_size``). ``--check`` first compares, per model, one graph
(or eager, off CUDA) fast step against a float64 eager step of the same weights and batch (loss and gradients).

Every lever that fails is reported with its error, not fatal. ``--time-budget-s`` skips what would start after
it. The JSON names the device, versions and commit. Tests never assert times; this prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from coda_exp.results import benchmark_environment

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script below
from fast_path_setup import batches, build, optimizer_of, sync, time_steps

# in the order they are measured by default: what decides the fast path first, the compiled ones (a minute of
# compiling each on a first call) last
LEVERS = ("eager", "static+fused+graph", "lightning-fast", "vmap+graph", "lightning-plain", "static", "static+fused",
          "vmap", "static+fused+compile", "static+fused+compile+graph")


def lever_step(args, model: str, lever: str):
    """(step function, batches) of one lever."""
    static = lever.startswith("static")
    fused, compiled, graph = "+fused" in lever, "+compile" in lever, "+graph" in lever
    if args.compile_mode == "null":
        compiled = False
    _, dm, task = build(args, model, fast=static)
    data = batches(dm, min(args.warmup + args.steps, args.max_batches), args.device)
    task.train()
    opt, sched = optimizer_of(task, fused)
    if not static:
        def plain(b):
            opt.zero_grad(set_to_none=True)
            loss, weight = task.train_loss(b)
            int(weight)  # the plain path's logging reads the token count on the host
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
        return plain, data
    from coda_exp.fast_step import FastOptions, FastStep

    fast = FastStep(task, FastOptions(cuda_graph=graph, compile=args.compile_mode if compiled else None,
                                      warmup_steps=3))

    def step(b):
        fast._forward_backward(b)
        opt.step()
        if sched is not None:
            sched.step()
    step.fast = fast
    return step, data


def vmap_step(args, model: str, graph: bool):
    """S seeds of ``model`` in one process: stacked weights, vmapped loss, one fused Adam (= S Adams)."""
    from torch.func import functional_call, stack_module_state

    seeds = args.vmap
    tasks, data = [], []
    for s in range(seeds):  # each seed its own initial weights and its own batches
        _, dm, task = build(args, model, fast=True, seed=args.seed + s)
        tasks.append(task.train())
        data.append(batches(dm, min(args.warmup + args.steps, args.max_batches), args.device))
    nets = [t.model for t in tasks]
    params, buffers = stack_module_state(nets)
    params = {k: torch.nn.Parameter(v) for k, v in params.items()}
    base = nets[0]
    head = tasks[0]

    def one(p, bufs, batch):
        logits = functional_call(base, (p, bufs), (batch["src_ids"], batch["src_mask"], batch["tgt_in"],
                                                   batch["tgt_mask"]))
        loss, _ = head._loss(logits, batch)
        return loss

    keys = ("src_ids", "src_mask", "tgt_in", "tgt_out", "tgt_mask")
    stacked = [{k: torch.stack([data[s][i][k] for s in range(seeds)]) for k in keys} for i in range(len(data[0]))]
    opt = torch.optim.Adam(params.values(), lr=1e-3, fused=args.device.startswith("cuda"))
    batched = torch.vmap(one, in_dims=(0, 0, 0), randomness="different")

    def fwd_bwd(b):
        for p in params.values():
            if p.grad is not None:
                p.grad.zero_()
        loss = batched(params, buffers, b).sum()
        loss.backward()
        return loss.detach()

    if not graph:
        def step(b):
            fwd_bwd(b)
            opt.step()
        return step, stacked
    static, holder = {k: v.clone() for k, v in stacked[0].items()}, {}

    def step(b):
        if "graph" not in holder:
            if holder.setdefault("warm", 0) < 3:
                holder["warm"] += 1
                fwd_bwd(b)
                opt.step()
                return
            g = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                fwd_bwd(static)
            holder["graph"] = g
        for k, v in static.items():
            v.copy_(b[k], non_blocking=True)
        holder["graph"].replay()
        opt.step()
    return step, stacked


def lightning_ms(args, model: str, fast: bool) -> float:
    """ms per step inside ``trainer.fit`` (steps warmup..warmup+steps), Lightning's overhead included."""
    import pytorch_lightning as pl
    from hydra.utils import instantiate
    from omegaconf import open_dict

    cfg, dm, task = build(args, model, fast=fast)
    marks = {}

    class Clock(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step in (args.warmup, args.warmup + args.steps):
                sync(args.device)
                marks[trainer.global_step] = time.perf_counter()

    with open_dict(cfg):
        cfg.trainer.accelerator = "gpu" if args.device.startswith("cuda") else "cpu"
        cfg.trainer.max_steps = args.warmup + args.steps
        cfg.trainer.limit_val_batches = 0  # training steps only
        cfg.trainer.enable_progress_bar = False
        cfg.trainer.enable_checkpointing = False
        cfg.trainer.num_sanity_val_steps = 0
    trainer = instantiate(cfg.trainer, callbacks=[Clock()], logger=False)
    trainer.fit(task, datamodule=dm)
    return (marks[args.warmup + args.steps] - marks[args.warmup]) / args.steps * 1000


def eval_seconds(args, model: str) -> float:
    import pytorch_lightning as pl

    args_eval = argparse.Namespace(**{**vars(args), "override": [*args.override, f"data.num_test={args.eval}"]})
    _, dm, task = build(args_eval, model, fast=True)
    trainer = pl.Trainer(accelerator="gpu" if args.device.startswith("cuda") else "cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    sync(args.device)
    t0 = time.perf_counter()
    trainer.test(task, datamodule=dm, verbose=False)
    sync(args.device)
    return time.perf_counter() - t0


def check(args, model: str) -> dict:
    """One fast step (graph on CUDA) against a float64 eager step of the same weights and batch."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # restored below
    try:
        return _check(args, model)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def _check(args, model: str) -> dict:
    from coda_exp.fast_step import FastOptions, FastStep

    _, dm, task = build(args, model, fast=True)
    for m in task.modules():  # dropout off (modules, and attention dropout rates): both steps compute one function
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        elif isinstance(getattr(m, "dropout", None), float):
            m.dropout = 0.0
    task.train()
    data = batches(dm, 6, args.device)
    fast = FastStep(task, FastOptions(cuda_graph=True, warmup_steps=3))
    for b in data[:5]:  # 3 warm-up steps, the capture, one replay (no optimizer step: same weights throughout)
        fast._forward_backward(b)
    loss = fast._forward_backward(data[5]).double()
    grads = [p.grad.double().clone() for p in task.parameters() if p.requires_grad]
    ref = task.double()
    ref.zero_grad(set_to_none=True)
    batch64 = data[5]
    ref_loss, _ = ref.train_loss(batch64)
    ref_loss.backward()
    rel = [float((g - p.grad).norm() / p.grad.norm().clamp_min(1e-30)) for g, p in
           zip(grads, [p for p in ref.parameters() if p.requires_grad])]
    ref_loss = ref_loss.detach()
    out = {"loss": float(loss), "loss_float64": float(ref_loss), "graphs": len(fast.graphs),
           "replays": fast.replays, "max_grad_rel_err": max(rel),
           "ok": abs(float(loss) - float(ref_loss)) <= 1e-4 * abs(float(ref_loss)) and max(rel) < 1e-3}
    task.float()
    return out


def worker(args) -> None:
    """One of ``--parallel`` processes: warm up, wait for the common start, count steps until the common end."""
    step, data = lever_step(args, args.models[0], args.parallel_lever)
    for b in data[:args.warmup]:
        step(b)
    sync(args.device)
    while time.time() < args.start_at:
        time.sleep(0.01)
    n, t0 = 0, time.time()
    while time.time() < args.start_at + args.parallel_s:
        step(data[args.warmup + n % (len(data) - args.warmup)])
        n += 1
        if n % 50 == 0:
            sync(args.device)
    sync(args.device)
    print(json.dumps({"steps": n, "seconds": time.time() - t0}), flush=True)


def side_by_side(args, lever: str) -> dict:
    start_at = time.time() + args.parallel_startup_s
    cmd = [sys.executable, __file__, "--worker", "--device", args.device, "--scale", args.scale, "--models",
           args.models[0], "--parallel-lever", lever, "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--start-at", str(start_at), "--parallel-s", str(args.parallel_s), "--compile-mode", args.compile_mode,
           *[f"--override={o}" for o in args.override]]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(args.parallel)]
    results, errors = [], []
    for p in procs:
        out, err = p.communicate(timeout=args.parallel_startup_s + args.parallel_s + 300)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        (results if lines else errors).append(json.loads(lines[-1]) if lines else err[-500:])
    total = sum(r["steps"] for r in results)
    return {"lever": lever, "processes": args.parallel, "finished": len(results), "errors": errors,
            "steps_per_s": total / args.parallel_s, "ms_per_step_each": args.parallel_s * 1000 * len(results) / max(total, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", nargs="+", default=["transformer", "coda_transformer"])
    parser.add_argument("--levers", nargs="+", default=list(LEVERS), choices=LEVERS)
    parser.add_argument("--scale", default="paper", help="the MLU scale whose model and batch are timed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--max-batches", type=int, default=64, help="distinct batches cycled through")
    parser.add_argument("--compile-mode", default="default", help="torch.compile mode of +compile (null: off)")
    parser.add_argument("--vmap", type=int, default=3, help="seeds per process of the vmap levers")
    parser.add_argument("--parallel", type=int, default=0, help="processes side by side (0: not measured)")
    parser.add_argument("--parallel-lever", default=None, help="the lever they run (default: the fastest measured)")
    parser.add_argument("--parallel-s", type=float, default=30.0)
    parser.add_argument("--parallel-startup-s", type=float, default=90.0, help="time the workers get to warm up")
    parser.add_argument("--eval", type=int, default=0, help="test pairs to decode (545455: the paper's test set)")
    parser.add_argument("--check", action="store_true", help="fast step vs float64 eager step first")
    parser.add_argument("--time-budget-s", type=float, default=1e9)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--override", action="append", default=[], help="a train.py override for every build")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    t_start = time.time()
    out = {"environment": benchmark_environment(), "args": {k: str(v) for k, v in vars(args).items()}, "check": {},
           "ms_per_step": {}, "errors": {}, "side_by_side": None, "eval_s": {}}
    print(json.dumps(out["environment"]))

    def left() -> float:
        return args.time_budget_s - (time.time() - t_start)

    def save() -> None:  # after every measurement: a run cut short (a time limit) keeps what it measured
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=1))

    for model in args.models:
        out["ms_per_step"][model] = {}
        if args.check and left() > 0:
            try:
                out["check"][model] = check(args, model)
            except Exception as err:  # noqa: BLE001 - report, go on
                out["check"][model] = {"ok": False, "error": f"{type(err).__name__}: {err}"[:500]}
            print(model, "check", out["check"][model], flush=True)
            save()
    for lever in args.levers:  # lever by lever, both models each: the first levers are the most wanted
        for model in args.models:
            if left() <= 0:
                out["errors"][f"{model}/{lever}"] = "skipped: time budget"
                continue
            if "graph" in lever and not args.device.startswith("cuda"):
                continue
            try:
                if lever.startswith("lightning"):
                    ms = lightning_ms(args, model, fast=lever == "lightning-fast")
                elif lever.startswith("vmap"):
                    step, data = vmap_step(args, model, graph=lever == "vmap+graph")
                    ms = time_steps(step, data, args.warmup, args.steps, args.device) / args.vmap
                else:
                    step, data = lever_step(args, model, lever)
                    ms = time_steps(step, data, args.warmup, args.steps, args.device)
                    fast = getattr(step, "fast", None)
                    if fast is not None and (fast.fallback or fast.graphs):  # what the lever really ran
                        out.setdefault("fast_steps", {})[f"{model}/{lever}"] = {
                            "fallback": fast.fallback, "graphs": len(fast.graphs), "replays": fast.replays}
                out["ms_per_step"][model][lever] = round(ms, 3)
            except Exception as err:  # noqa: BLE001 - a lever that fails is a result too
                out["errors"][f"{model}/{lever}"] = f"{type(err).__name__}: {err}"[:500]
                traceback.print_exc()
            base = out["ms_per_step"][model].get("eager")
            got = out["ms_per_step"][model].get(lever)
            ratio = f" ({base / got:.2f}x eager)" if base and got else ""
            print(f"{model:18s} {lever:28s} {got if got is not None else 'failed':>10} ms/step{ratio}", flush=True)
            save()
    if args.parallel and left() > args.parallel_s + args.parallel_startup_s:
        measured = {k: v for k, v in out["ms_per_step"].get(args.models[0], {}).items()
                    if not k.startswith(("lightning", "vmap"))}
        lever = args.parallel_lever or (min(measured, key=measured.get) if measured else "static+fused")
        out["side_by_side"] = side_by_side(args, lever)
        print("side by side:", out["side_by_side"], flush=True)
        save()
    for model in args.models:
        if args.eval and left() > 0:
            try:
                out["eval_s"][model] = round(eval_seconds(args, model), 2)
                print(f"{model:18s} test of {args.eval} pairs: {out['eval_s'][model]} s", flush=True)
            except Exception as err:  # noqa: BLE001
                out["errors"][f"{model}/eval"] = f"{type(err).__name__}: {err}"[:500]
            save()
    if args.json:
        print("wrote", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
