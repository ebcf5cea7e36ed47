"""``coda-exp estimate``: how long would this run take here? Time a few training steps and evaluation batches,
extrapolate to the config (``python scripts/estimate_runtime.py`` in a checkout, ``make estimate ARGS=...``).

    coda-exp estimate task=mlu model=coda_transformer            # the paper scale (default)
    coda-exp estimate task=mlu model=transformer scale=cpu --steps 100
    coda-exp estimate task=snli model=decompatt_coda data.dir=data/snli

Any training override works, one value per key (a sweep's ``seed=1,2`` or ``-m`` is refused: estimate each
configuration on its own), before or after the options. An experiment that is a sweep (``experiment=table_3``) is
refused as ``train.py`` refuses it without ``-m``, naming its first run: estimate one of its runs
(``experiment=table_3 task=snli model=decompatt``; seeds take the same time). Estimating every job instead would
load each task's data and time each job's steps, a table's worth of the work, to repeat numbers that differ only
by task and model. The first ``--warmup`` steps (JIT compilation, allocator
warm-up) are run but not timed; then ``--steps`` optimizer steps (data loading included) and ``--eval-batches``
validation batches (free decoding included for sequence tasks) are timed on the configured trainer's device. The
estimate is
  train steps x time per step + (validations x validation batches + test batches) x time per eval batch,
where train steps = task.max_steps, or task.epochs x batches per epoch; validations = train steps /
task.val_check_interval for step-based tasks, else epochs. Nothing is written to results/.
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def _hours(seconds: float) -> str:
    if seconds < 2 * 3600:
        return f"{seconds:,.0f} s = {seconds / 60:.1f} min"
    return f"{seconds:,.0f} s = {seconds / 3600:.1f} h"


def _num_batches(loader) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable stream
        return None


class _StepTimer:
    """Wall time of the optimizer steps after the first ``warmup``."""

    def __init__(self, warmup: int):
        import pytorch_lightning as pl

        class Callback(pl.Callback):
            def on_train_batch_end(cb, trainer, *args) -> None:
                if trainer.global_step == warmup:
                    self.start = time.perf_counter()
                self.end, self.steps = time.perf_counter(), trainer.global_step - warmup

        self.callback, self.start, self.end, self.steps = Callback(), None, None, 0

    @property
    def per_step(self) -> float:
        if self.start is None or self.steps <= 0:
            raise RuntimeError("no timed training step: the data ran out before --warmup + --steps steps")
        return (self.end - self.start) / self.steps


def _refuse_sweeps(overrides: list[str]) -> None:
    """A swept override (``seed=1,2``, ``-m``'s syntax) is a UserError naming it: the estimate times one
    configuration, where Hydra would advise ``--multirun``, which estimate does not take. An override Hydra cannot
    parse is left to the composition's own message."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from coda_exp.errors import UserError

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return
    for override in parsed:
        if override.is_sweep_override():
            try:
                example = f" (e.g. {override.get_key_element()}={next(iter(override.sweep_string_iterator()))})"
            except (HydraException, StopIteration, ValueError):  # glob(...) needs the configs to list its options
                example = ""
            raise UserError(f"{override.input_line}: estimate times one configuration, so each key takes one value; "
                            f"pick one{example} and estimate each configuration on its own")


def _refuse_experiment_sweeps(overrides: list[str]) -> None:
    """An experiment that is a sweep chosen without naming one of its runs (``experiment=table_3``, or
    ``experiment=table_6`` whose model would be the config's own decompatt): the entry point's check
    (:func:`coda_exp.sweeps.sweep_problem`), a UserError naming the sweep's first run. A config Hydra cannot compose
    is left to the build's own message."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from coda_exp.environment import config_dir
    from coda_exp.errors import UserError
    from coda_exp.sweeps import sweep_problem

    GlobalHydra.instance().clear()
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            found = sweep_problem(compose("train", overrides=list(overrides), return_hydra_config=True), parsed)
    except HydraException:
        return
    finally:
        GlobalHydra.instance().clear()
    if found is not None:
        experiment, runs, first, off = found
        why = (f"; as given, the run would have the config's own {' '.join(off)}, which is none of the sweep's runs"
               if off else "")
        raise UserError(f"experiment={experiment} is a sweep of {runs} run{'s' * (runs > 1)}: estimate times one "
                        f"configuration; name one of its runs ({' '.join(first)}){why}")


#: the module docstring as --help shows it: after the usage line, without its "coda-exp estimate: " or rst quotes
_DESCRIPTION = "H" + __doc__.replace("``", "").removeprefix("coda-exp estimate: h")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=_DESCRIPTION,  # the whole text, once
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. task=mlu model=transformer")
    parser.add_argument("--steps", type=int, default=50, help="timed training steps (default 50)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    parser.add_argument("--eval-batches", type=int, default=2, help="timed validation batches (default 2)")
    argv = sys.argv[1:] if argv is None else list(argv)
    flag = next((a for a in argv if a in ("-m", "--multirun")), None)
    if flag:
        from coda_exp.errors import UserError

        raise UserError(f"{flag}: estimate times one configuration and takes no sweep; give each key one value")
    args = parser.parse_intermixed_args(argv)  # options before, after or between the overrides
    if args.steps < 1 or args.warmup < 1 or args.eval_batches < 1:
        parser.error("--steps, --warmup and --eval-batches must be >= 1")
    _refuse_sweeps(args.overrides)
    _refuse_experiment_sweeps(args.overrides)

    import torch
    from hydra.utils import instantiate

    from coda_exp import offline, pipeline

    cfg, datamodule, task = offline.build_offline(args.overrides, prefix="coda-estimate-", trainer=True)
    params = sum(p.numel() for p in task.parameters())
    timer = _StepTimer(args.warmup)
    trainer = instantiate(cfg.trainer, max_steps=args.warmup + args.steps, max_epochs=-1, limit_val_batches=0,
                          num_sanity_val_steps=0, logger=False, callbacks=[timer.callback], enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, val_check_interval=None,
                          check_val_every_n_epoch=1)
    trainer.fit(task, datamodule=datamodule)
    per_step = timer.per_step

    val_loader = datamodule.val_dataloader()
    evaluator = instantiate(cfg.trainer, limit_val_batches=args.eval_batches, logger=False, callbacks=[],
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    evaluator.validate(task, dataloaders=val_loader, verbose=False)  # warm-up (e.g. decoding JIT paths)
    start = time.perf_counter()
    evaluator.validate(task, dataloaders=val_loader, verbose=False)
    timed_eval = min(args.eval_batches, _num_batches(val_loader) or args.eval_batches)
    per_eval_batch = (time.perf_counter() - start) / timed_eval

    train_batches = _num_batches(datamodule.train_dataloader())
    max_steps = cfg.task.get("max_steps") or -1
    if max_steps > 0:
        steps = max_steps
        interval = cfg.task.get("val_check_interval")
        validations = steps // interval if isinstance(interval, int) and interval > 0 else 1
    elif train_batches is not None:
        steps = int(cfg.task.epochs) * train_batches
        validations = int(cfg.task.epochs)
    else:
        raise SystemExit("the config sets neither task.max_steps nor a sized training set: nothing to extrapolate")
    val_batches = _num_batches(val_loader) or 0
    datamodule.setup("test")
    test_batches = _num_batches(datamodule.test_dataloader()) or 0
    train_s = steps * per_step
    eval_s = (validations * val_batches + test_batches) * per_eval_batch
    out = {"per_step_s": per_step, "per_eval_batch_s": per_eval_batch, "steps": steps, "validations": validations,
           "val_batches": val_batches, "test_batches": test_batches, "train_s": train_s, "eval_s": eval_s,
           "total_s": train_s + eval_s, "params": params}

    device = pipeline.device_description(trainer)
    print(f"\n{cfg.task.name} x {cfg.model.name}, scale={cfg.scale_name}, on {device} "
          f"(torch threads: {torch.get_num_threads()}), {params:,} parameters")
    print(f"  training: {per_step * 1000:.1f} ms/step (mean of {args.steps} steps, batch {cfg.data.batch_size}) "
          f"x {steps:,} steps = {_hours(train_s)}")
    print(f"  evaluation: {per_eval_batch:.2f} s/batch (batch {cfg.data.get('eval_batch_size', '?')}) x "
          f"({validations} validations x {val_batches} + {test_batches} test) batches = {_hours(eval_s)}")
    print(f"  total: {_hours(out['total_s'])}" + ("" if math.isfinite(out["total_s"]) else " (?)"))
    return out
