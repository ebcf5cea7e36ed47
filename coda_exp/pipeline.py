"""From a composed config to a finished run: data, model, task, trainer; fit, test the best checkpoint, record.

This is the only module that knows about Hydra configs; everything it builds is plain PyTorch / Lightning.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from coda_exp import cli, results  # noqa: F401 (cli registers the configs' resolvers: ${dir_if_exists:...})
from coda_exp.io import atomic_write

log = logging.getLogger(__name__)

META_KEYS = ("name", "families")  # config keys that describe a node but are not constructor arguments


def _hydra_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return list(HydraConfig.get().overrides.task)
    return []


# Overrides that change a run's training or evaluation budget: a run with any of them is not at its scale group's
# setting, so its record's scale says so (``cpu (task.max_steps=10000)``) and tables never pool it with runs at the
# plain scale. An explicit ``scale_name=...`` override is taken as the user's own label.
BUDGET_KEYS = ("task.max_steps", "task.epochs", "task.max_epochs", "trainer.max_steps", "trainer.max_epochs",
               "data.max_train_examples", "data.max_eval_examples", "data.num_train", "data.num_validation",
               "data.num_test", "debug", "trainer.limit_train_batches", "trainer.limit_val_batches",
               "trainer.limit_test_batches")


def scale_label(scale_name: str, overrides: list[str]) -> str:
    """The record's ``scale``: the scale group's name, plus every budget-changing override (``BUDGET_KEYS``)."""
    parsed = [(o.lstrip("+~").split("=", 1)[0].strip(), o.lstrip("+~")) for o in overrides]
    if any(key == "scale_name" for key, _ in parsed):
        return str(scale_name)
    changed = [text for key, text in parsed if key in BUDGET_KEYS]
    return f"{scale_name} ({', '.join(changed)})" if changed else str(scale_name)


def attention_options(cfg: DictConfig) -> dict[str, Any]:
    """The attention's options as recorded in the run record: its name and every value but Hydra's own keys
    (``model.attention`` of pairwise models, ``model.scoring`` of Transformers)."""
    att = cfg.model.get("attention", cfg.model.get("scoring"))
    if att is None:
        return {"name": "none"}
    opts = OmegaConf.to_container(att, resolve=True)
    return {k: v for k, v in opts.items() if not k.startswith("_")}


def _strip(node: dict) -> dict:
    return {k: (_strip(v) if isinstance(v, dict) else v) for k, v in node.items() if k not in META_KEYS}


def check_compatible(cfg: DictConfig) -> None:
    """A clear error for a model that cannot run a task (e.g. a seq2seq Transformer on SNLI)."""
    families = cfg.model.get("families")
    if families is not None and cfg.task.family not in families:
        raise ValueError(f"model={cfg.model.name} does not fit task={cfg.task.name}: the task is "
                         f"{cfg.task.family}, the model serves {list(families)}")


def build_model(cfg: DictConfig, datamodule) -> torch.nn.Module:
    """The network from ``cfg.model`` plus what only the data knows (``datamodule.model_kwargs()``: vocabulary
    sizes, number of classes, pretrained vectors...)."""
    check_compatible(cfg)
    spec = _strip(OmegaConf.to_container(cfg.model, resolve=True))
    return instantiate(spec, **datamodule.model_kwargs())


def build_task(cfg: DictConfig, model: torch.nn.Module, datamodule) -> pl.LightningModule:
    """The task's LightningModule around ``model``, with the optimiser/scheduler factories and what the data
    tells the task (``datamodule.task_kwargs()``: number of classes, tokenizers for decoding...)."""
    scheduler = instantiate(cfg.scheduler) if cfg.get("scheduler") else None
    return instantiate(cfg.task.module, model=model, optimizer=instantiate(cfg.optimizer), scheduler=scheduler,
                       **datamodule.task_kwargs())


def build_callbacks(cfg: DictConfig, with_logger: bool = True) -> list[pl.Callback]:
    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    if not with_logger:  # logger=none: nothing to send learning rates to
        callbacks = [c for c in callbacks if not isinstance(c, pl.callbacks.LearningRateMonitor)]
    return callbacks


def periodic_checkpoints(cfg: DictConfig) -> pl.Callback | None:
    """With ``task.average_last = N > 0``: keep the last N checkpoints, one every validation interval."""
    n = int(cfg.task.get("average_last") or 0)
    if n <= 0:
        return None
    every = cfg.task.get("val_check_interval")
    return pl.callbacks.ModelCheckpoint(
        dirpath=Path(cfg.paths.output_dir) / "checkpoints" / "periodic", filename="step{step}",
        auto_insert_metric_name=False, every_n_train_steps=int(every) if isinstance(every, int) else None,
        save_top_k=n, monitor="step", mode="max")


def average_last(cfg: DictConfig, trainer: pl.Trainer) -> tuple[str, int] | None:
    """T2T's checkpoint averaging: the mean weights of the last ``task.average_last`` checkpoints, saved as
    ``checkpoints/averaged.ckpt`` (tested instead of the best checkpoint). Returns (path, number averaged), or
    None when it does not apply.

    Under DDP rank 0 writes the file and broadcasts its answer (``trainer.strategy.broadcast``, which every rank
    reaches: a synchronisation point after the file is written), so every rank tests the same averaged
    checkpoint. On one device the broadcast returns rank 0's own answer.
    """
    from coda_exp import checkpoint_avg

    n = int(cfg.task.get("average_last") or 0)
    if n <= 0:  # the same config on every rank: no rank enters the broadcast
        return None
    result = None
    if trainer.is_global_zero:
        folder = Path(cfg.paths.output_dir) / "checkpoints" / "periodic"
        available = len(list(folder.glob("*.ckpt"))) if folder.is_dir() else 0
        if 0 < available < n:
            log.warning("checkpoint averaging: only %d periodic checkpoints (task.average_last=%d)", available, n)
        if available:
            paths = checkpoint_avg.select_last(folder, min(n, available))
            out = checkpoint_avg.save_atomic(checkpoint_avg.average_checkpoints(paths),
                                             folder.parent / "averaged.ckpt")
            log.info("averaged %d checkpoints into %s", len(paths), out)
            result = (str(out), len(paths))
    result = trainer.strategy.broadcast(result, src=0)
    return None if result is None else (str(result[0]), int(result[1]))


def build_loggers(cfg: DictConfig) -> list:
    out = []
    for c in (cfg.get("logger") or {}).values():
        if c is None:
            continue
        extra = {}
        if str(c.get("_target_", "")).endswith("WandbLogger") and "mode" not in c:
            # an explicit mode wins over WANDB_MODE (which `make` sets to offline and which Lightning's offline
            # logger leaves set for later jobs of a sweep): logger.wandb.offline=false really goes online
            extra["mode"] = "offline" if c.get("offline", False) else "online"
        out.append(instantiate(c, **extra))
    return out


def device_description(trainer: pl.Trainer) -> str:
    if torch.cuda.is_available() and trainer.num_devices and isinstance(
            trainer.accelerator, pl.accelerators.CUDAAccelerator):
        return f"{trainer.num_devices}x {torch.cuda.get_device_name(0)}"
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def _metrics(outputs: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in outputs:
        for k, v in d.items():
            out[k] = float(v.item() if hasattr(v, "item") else v)
    return out


def write_predictions(rows: list[dict], path: Path) -> Path:
    """Test predictions as gzip JSON lines, written atomically."""
    with atomic_write(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for r in rows:
            f.write((json.dumps(r) + "\n").encode())
    return path


RESOLVED_CONFIG = "config_resolved.yaml"


def save_resolved_config(cfg: DictConfig) -> Path:
    """The fully resolved config beside the run's outputs: what scripts (plots, analysis) rebuild a run from."""
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results.atomic_write_text(out / RESOLVED_CONFIG, OmegaConf.to_yaml(cfg, resolve=True))
    return out / RESOLVED_CONFIG


def load_trained(checkpoint: str | os.PathLike, config: str | os.PathLike | None = None):
    """Rebuild (cfg, datamodule, network) of a finished run from a checkpoint; the config defaults to the
    ``config_resolved.yaml`` of the run folder the checkpoint lies in (``<run>/checkpoints/x.ckpt``)."""
    checkpoint = Path(checkpoint)
    config = Path(config) if config else checkpoint.parent.parent / RESOLVED_CONFIG
    if not config.is_file():
        raise FileNotFoundError(f"no run config at {config}; pass the run's {RESOLVED_CONFIG} explicitly")
    cfg = OmegaConf.load(config)
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    net = build_model(cfg, datamodule)
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    net.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
    return cfg, datamodule, net.eval()


def print_summary(record: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{record['task']} × {record['model']} (seed {record['seed']}, scale {record['scale']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k in sorted(record["metrics"]):
        table.add_row(k, f"{record['metrics'][k]:.4f}")
    Console().print(table)


def _finish_wandb(loggers: list) -> None:
    if any(type(lg).__name__ == "WandbLogger" for lg in loggers):
        import wandb

        wandb.finish()  # so that the next job of a sweep starts a fresh W&B run


def run(cfg: DictConfig) -> float | None:
    """Train, validate and test; write the run record. Returns the best monitored value (for sweepers)."""
    start = time.time()
    check_compatible(cfg)
    pl.seed_everything(cfg.seed, workers=True)
    save_resolved_config(cfg)
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    model = build_model(cfg, datamodule)
    task = build_task(cfg, model, datamodule)
    loggers = build_loggers(cfg)
    callbacks = build_callbacks(cfg, with_logger=bool(loggers))
    periodic = periodic_checkpoints(cfg)
    if periodic is not None:
        callbacks.append(periodic)
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    try:
        for lg in loggers:
            lg.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
        trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
        ckpt = trainer.checkpoint_callback
        best = ckpt.best_model_path if ckpt is not None and ckpt.best_model_path else None
        averaged = average_last(cfg, trainer)
        if averaged is not None:
            best = averaged[0]
        metrics: dict[str, float] = {}
        if cfg.get("test_after_fit", True):
            task.prepare_final_evaluation()  # e.g. sequence tasks: validate the tested checkpoint with beam search
            metrics.update(_metrics(trainer.validate(task, datamodule=datamodule, ckpt_path=best, verbose=False)))
            metrics.update(_metrics(trainer.test(task, datamodule=datamodule, ckpt_path=best, verbose=False)))
        monitored = metrics.get(cfg.task.monitor)
        record = {
            "schema_version": 1,
            "run_id": results.make_run_id(cfg.task.name, cfg.model.name, cfg.seed),
            "task": cfg.task.name,
            "model": cfg.model.name,
            "attention": attention_options(cfg),
            "seed": int(cfg.seed),
            "scale": scale_label(cfg.scale_name, _hydra_overrides()),
            "metrics": metrics,
            "steps": int(trainer.global_step),
            "epochs": int(trainer.current_epoch),
            "wall_time_s": round(time.time() - start, 3),
            "device": device_description(trainer),
            "git_commit": results.git_commit(cfg.paths.root_dir),
            "overrides": _hydra_overrides(),
            "created": results.utc_now_iso(),
            "status": "finished" if not trainer.interrupted else "interrupted",
            "best_checkpoint": best,
            "checkpoints_averaged": averaged[1] if averaged else 0,
            "output_dir": str(cfg.paths.output_dir),
            "data": dict(datamodule.stats),
            "warnings": list(datamodule.warnings),
            "hparams": OmegaConf.to_container(cfg.model, resolve=True),
        }
        if trainer.is_global_zero:
            runs_dir = Path(cfg.paths.results_dir) / "runs"
            if cfg.get("save_predictions", True) and task.test_predictions:
                pred = Path(cfg.paths.results_dir) / "predictions" / f"{record['run_id']}.jsonl.gz"
                record["predictions"] = str(write_predictions(task.test_predictions, pred))
            if cfg.get("save_record", True):
                path = results.write_record(record, runs_dir)
                log.info("run record: %s", path)
            print_summary(record)
        return monitored
    finally:
        _finish_wandb(loggers)
