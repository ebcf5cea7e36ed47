"""What ``bench_fast_path.py`` times its levers on: the MLU model of a scale built as ``train.py`` builds it
(without training), its training batches on the device, its optimizer (fused or not), and a step timer that
synchronises the device around the timed steps.
"""

from __future__ import annotations

import time

import torch


def overrides(args, model: str, fast: bool) -> list[str]:
    out = ["task=mlu", f"model={model}", f"scale={args.scale}", f"seed={args.seed}", *args.override]
    if fast:
        out += ["trainer=gpu_fast", f"fast.compile={args.compile_mode}"]
    return out


def build(args, model: str, fast: bool, seed: int | None = None):
    from coda_exp.offline import build_offline

    extra = [] if seed is None else [f"seed={seed}"]
    cfg, dm, task = build_offline([*overrides(args, model, fast), *extra], prefix="coda-bench-")
    return cfg, dm, task.to(args.device)


def batches(dm, n: int, device: str) -> list[dict]:
    it = iter(dm.train_dataloader())
    out = []
    for _ in range(n):
        b = next(it)
        out.append({k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in b.items()})
    return out


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def optimizer_of(task, fused: bool):
    from coda_exp.fast_step import with_fused

    params = [p for p in task.parameters() if p.requires_grad]
    opt = with_fused(task.optimizer_factory, params) if fused else task.optimizer_factory(params)
    sched = task.scheduler_factory(opt) if task.scheduler_factory is not None else None
    return opt, sched


def time_steps(step, data: list[dict], warmup: int, steps: int, device: str) -> float:
    """ms per step of ``step(batch)`` over ``steps`` batches after ``warmup`` untimed ones."""
    for b in data[:warmup]:
        step(b)
    sync(device)
    t0 = time.perf_counter()
    for i in range(steps):
        step(data[warmup + i % (len(data) - warmup)])
    sync(device)
    return (time.perf_counter() - t0) / steps * 1000
