"""The end of a run: its record (``coda_exp.results``), test predictions and summary, never lost to a bad folder.

The metric summary is printed first. The predictions then go to ``<results_dir>/predictions/`` and the record to
``<results_dir>/runs/``; whatever cannot be written there (the folders were checked writable before the first step,
but a disk can fill or a permission change during a long run) is written into the run's output folder instead
(``<output_dir>/run_record.json``, ``<output_dir>/predictions.jsonl.gz``; the system's temporary folder if that
fails too), the record pointing at where its predictions really are, and :class:`RecordWriteError` names each
fallback file (the record's, the predictions') and where to move it by hand (``results/runs/``,
``results/predictions/``), or says that the predictions were not saved. A run with ``save_record=false`` writes
nothing into ``<results_dir>``: its predictions (without a record to name them) go into its own folder.
"""

from __future__ import annotations

import gzip
import json
import logging
import platform
import tempfile
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from coda_exp import results, run_folder
from coda_exp.console import file_only
from coda_exp.data.common.embeddings import vectors_identity
from coda_exp.default_overrides import default_overrides
from coda_exp.environment import is_fixture_data
from coda_exp.errors import UserError
from coda_exp.experiments import experiment_of, experiment_settings, run_configuration
from coda_exp.fingerprint import run_label, scale_label
from coda_exp.io import atomic_write
from coda_exp.threads import thread_counts

log = logging.getLogger(__name__)

FALLBACK_RECORD = run_folder.FALLBACK_RECORD  # where run_folder's readers (auto_resume, coda-exp runs) look too
FALLBACK_PREDICTIONS = "predictions.jsonl.gz"


class RecordWriteError(UserError, OSError):
    """The run record could not be written to ``results/runs``; the message names the fallback file. A user's error
    (one message, exit status 2): a full disk or a folder made unwritable during the run, nothing lost."""


def attention_options(cfg: DictConfig) -> dict[str, Any]:
    """The attention's options as recorded in the run record: its name and every value but Hydra's own keys
    (``model.attention`` of pairwise models, ``model.scoring`` of Transformers)."""
    att = cfg.model.get("attention", cfg.model.get("scoring"))
    if att is None:
        return {"name": "none"}
    opts = OmegaConf.to_container(att, resolve=True)
    return {k: v for k, v in opts.items() if not k.startswith("_")}


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """The record's ``parameters``: ``total`` and ``trainable`` (each shared tensor once, frozen embeddings in
    ``total`` only) for every model, plus the model's own breakdown where it offers one
    (``model.parameter_breakdown() -> {name: count}``, e.g. AttConv's ``attconv`` layer, ``embeddings``, ``head``:
    the layer count is AttConv Table 7's "(360K)"). The generic counts win on a shared name."""
    params = list(model.parameters())  # nn.Module.parameters() yields a shared tensor once
    counts = {"total": sum(p.numel() for p in params),
              "trainable": sum(p.numel() for p in params if p.requires_grad)}
    breakdown = getattr(model, "parameter_breakdown", None)
    extra = breakdown() if callable(breakdown) else {}
    return {**{str(k): int(v) for k, v in extra.items()}, **counts}


def experiment_name() -> str | None:
    """The ``experiment=`` config of this Hydra job (``table_2``), else None."""
    from coda_exp.environment import group_choice

    choice = group_choice("experiment")
    return None if choice in (None, "null") else str(choice)


def world_size(trainer_cfg) -> int:
    """How many processes a trainer config trains with: ``devices`` (a count, a list of devices, ``"0,1"``; ``-1`` or
    ``auto``: every visible GPU under a GPU accelerator, every CPU core for ``-1`` on a CPU, else 1, as Lightning
    counts them) x ``num_nodes``."""
    import os

    devices, nodes = trainer_cfg.get("devices", 1), int(trainer_cfg.get("num_nodes") or 1)
    if isinstance(devices, str) and "," in devices:
        devices = [d for d in devices.split(",") if d.strip()]
    if not isinstance(devices, (int, str)) and devices is not None:  # a list of device indices
        return max(len(list(devices)), 1) * nodes
    text = str(devices).strip().lower()
    if text.lstrip("-").isdigit() and int(text) > 0:
        return int(text) * nodes
    if str(trainer_cfg.get("accelerator", "cpu")).lower() in ("gpu", "cuda"):
        return max(torch.cuda.device_count(), 1) * nodes
    return (os.cpu_count() or 1) * nodes if text == "-1" else nodes


def run_identity(cfg: DictConfig, overrides: list[str]) -> dict:
    """Which run this is, known before it starts, saved in its checkpoints (``coda_exp.run``) so that an evaluation
    of one (``coda-exp eval``) is recorded as a run of the same configuration: ``run_id``, ``task``, ``model``,
    ``seed``, ``scale``, ``overrides``, ``experiment`` and ``experiment_overrides`` (what its experiment's file sets,
    :mod:`coda_exp.experiments`), ``fingerprint``, ``fingerprint_overrides``, ``fingerprint_rule`` and
    ``fingerprint_defaults`` (:mod:`coda_exp.fingerprint`; the overrides that set what the configuration has without
    them, left out of the fingerprint and logged: :mod:`coda_exp.default_overrides`), ``vectors`` (what the pretrained word vectors are:
    ``coda_exp.data.common.embeddings.vectors_identity``; None without) and ``world_size`` (:func:`world_size`: its
    processes, in the fingerprint above 1). A missing vectors file is named here, before any data loads."""
    embeddings = cfg.data.get("embeddings") or {}
    vectors = vectors_identity(embeddings.get("path"))
    experiment = experiment_name() or experiment_of(overrides)
    settings = experiment_settings(experiment)  # (configs/experiment/, then hydra.searchpath's folders)
    if settings is None:  # an experiment from another config folder (--config-dir): its settings are not known here
        log.warning("experiment=%s: no configs/experiment/%s.yaml here; the fingerprint counts the command line "
                    "only", experiment, experiment)
    world = world_size(cfg.trainer)
    defaults = default_overrides(overrides)  # optimizer.lr=0.0003 where that is the lr anyway: no other configuration
    for override in defaults:
        log.info("%s is this configuration's default: it does not change the fingerprint", override)
    return {"run_id": results.make_run_id(cfg.task.name, cfg.model.name, cfg.seed), "task": str(cfg.task.name),
            "model": str(cfg.model.name), "seed": int(cfg.seed), "scale": scale_label(cfg.scale_name, overrides),
            "overrides": list(overrides), **run_configuration(overrides, vectors, experiment, settings or [], world, defaults),
            "vectors": vectors, "world_size": world}


def new_record(cfg: DictConfig, identity: dict, *, metrics: dict, kernels: dict, trainer: pl.Trainer,
               model: torch.nn.Module, datamodule, steps: int, epochs: int, start: float, commit: str | None,
               overrides: list[str], status: str) -> dict:
    """The run record's fields a training run and an evaluation share (the caller adds its own)."""
    import time

    return {
        "schema_version": 1,
        "run_id": identity["run_id"],
        "task": cfg.task.name,
        "model": cfg.model.name,
        "attention": attention_options(cfg),
        "attention_kernels": kernels,
        "seed": int(cfg.seed),
        "scale": identity["scale"],
        "fingerprint": identity["fingerprint"],
        "fingerprint_overrides": identity["fingerprint_overrides"],
        "fingerprint_rule": identity.get("fingerprint_rule"),
        "fingerprint_defaults": list(identity.get("fingerprint_defaults") or []),
        "experiment": identity.get("experiment"),
        "experiment_overrides": identity.get("experiment_overrides"),
        "vectors": identity.get("vectors"),
        "world_size": identity.get("world_size"),
        "metrics": metrics,
        "steps": int(steps),
        "epochs": int(epochs),
        "wall_time_s": round(time.time() - start, 3),
        "device": device_description(trainer),
        "environment": software_environment(),
        "threads": {"configured": cfg.get("threads"), **thread_counts()},  # read after the run: drift shows
        "git_commit": commit,
        "overrides": list(overrides),
        "created": results.utc_now_iso(),
        "status": status,
        "output_dir": str(cfg.paths.output_dir),
        "data": dict(datamodule.stats),
        "fixture_data": is_fixture_data(cfg.data.get("dir")),  # the tiny fixtures: a smoke test, whatever its scale
        "warnings": list(datamodule.warnings),
        "hparams": OmegaConf.to_container(cfg.model, resolve=True),
        "parameters": parameter_counts(model),
    }


def device_description(trainer: pl.Trainer) -> str:
    if torch.cuda.is_available() and trainer.num_devices and isinstance(
            trainer.accelerator, pl.accelerators.CUDAAccelerator):
        return f"{trainer.num_devices}x {torch.cuda.get_device_name(0)}"
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def software_environment() -> dict:
    """What a result depends on besides the code, the configuration and the thread counts: the CPU (its model, and
    the instruction set torch's kernels dispatch to: AVX512 and AVX2 kernels sum in other orders, so the same run
    differs in its last bits, and after thousands of steps in its accuracy) and the library versions. Two records
    are comparable bit for bit only where these agree (docs/results.md)."""
    from importlib import metadata

    env = {"python": platform.python_version(), "torch": torch.__version__, "cpu": cpu_model(),
           "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    for package in ("pytorch-lightning", "numpy", "numba", "triton"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    if torch.cuda.is_available():
        env["cuda"] = torch.version.cuda
    return env


def write_predictions(rows: list[dict], path: Path) -> Path:
    """Test predictions as gzip JSON lines, written atomically."""
    with atomic_write(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for r in rows:
            f.write((json.dumps(r) + "\n").encode())
    return path


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def summary_outcome(record: dict) -> str:
    """How the run ended, for the summary's title: ``finished, 1 step in 3 s`` for a training run; an evaluation's
    steps are its checkpoint's (``evaluated in 3 s (checkpoint trained 1 step)``)."""
    wall = f"{record['wall_time_s']:.0f} s"
    if record.get("mode") == "eval":
        return f"evaluated in {wall} (checkpoint trained {_steps(record['steps'])})"
    return f"{record['status']}, {_steps(record['steps'])} in {wall}"


def print_summary(record: dict) -> None:
    """The end of a run on the console: what ran (with the overrides that change its configuration:
    ``coda_exp.fingerprint.run_label``), its metrics, and the run folder (config, log, checkpoints). The title and
    folder are plain lines, never wrapped to the table's width (a path stays one line to copy)."""
    from rich.console import Console
    from rich.table import Table

    title = f"{run_label(record)} (seed {record['seed']}, scale {record['scale']}): {summary_outcome(record)}"
    print(title, flush=True)
    final = ", ".join(f"{k} {record['metrics'][k]:.4f}" for k in sorted(record["metrics"]))
    log.info("%s%s", title, f"; {final}" if final else "", **file_only())  # train.log: the table printed below
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k in sorted(record["metrics"]):
        table.add_row(k, f"{record['metrics'][k]:.4f}")
    if record["metrics"]:
        Console().print(table)
    if record.get("mode") != "eval" and record.get("best_checkpoint"):  # the file to give coda-exp eval
        kind = "averaged" if record.get("checkpoints_averaged") else "best"
        print(f"{kind} checkpoint (tested; coda-exp eval ckpt_path=...): {record['best_checkpoint']}", flush=True)
    print(f"run folder: {record['output_dir']}", flush=True)


def _first_writable(write, targets: list[Path]) -> tuple[Path, list[str]]:
    """``write(path)`` to the first target that works; (the path written, the errors of those that failed)."""
    errors: list[str] = []
    for target in targets:
        try:
            return write(target), errors
        except OSError as err:
            errors.append(f"{target}: {err.strerror or err}")
    raise RecordWriteError("could not write anywhere: " + "; ".join(errors))


def save_outputs(record: dict, predictions: list[dict] | None, cfg: DictConfig) -> Path | None:
    """Print the summary, then write the predictions and the record (module docstring); return the record's path.
    Whatever went to a fallback (or nowhere) is named in one :class:`RecordWriteError`, with where to move it.

    ``cfg``: ``paths.results_dir``, ``paths.output_dir``, ``save_record``, ``save_predictions``."""
    print_summary(record)
    results_dir, output_dir = Path(cfg.paths.results_dir), Path(cfg.paths.output_dir)
    spare = Path(tempfile.gettempdir()) / "coda_exp" / record["run_id"]
    problems: list[str] = []
    kept: list[str] = []  # what went elsewhere than results/, and where to move it
    if cfg.get("save_predictions", True) and predictions:
        own = output_dir / FALLBACK_PREDICTIONS  # save_record=false: no record in results/ to name them, so here
        home = results_dir / "predictions" / f"{record['run_id']}.jsonl.gz" if cfg.get("save_record", True) else own
        try:
            path, errors = _first_writable(lambda p: write_predictions(predictions, p),
                                           list(dict.fromkeys([home, own, spare / FALLBACK_PREDICTIONS])))
        except RecordWriteError as err:  # nowhere: the record is still written (its metrics), without them
            problems.append(str(err).removeprefix("could not write anywhere: "))
            kept.append("the test predictions were not saved")
        else:
            record["predictions"] = str(path)
            problems += errors
            if path != home:
                kept.append(f"the test predictions are at {path} (move them into {home.parent}/ as {home.name})")
    if cfg.get("save_record", True):
        targets = [results_dir / "runs", output_dir, spare]
        names = [f"{record['run_id']}.json", FALLBACK_RECORD, FALLBACK_RECORD]

        def write(folder: Path) -> Path:
            if folder == targets[0]:
                return results.write_record(record, folder)
            name = names[targets.index(folder)]
            return results.atomic_write_text(folder / name, results.record_text(record))

        try:
            record_path, errors = _first_writable(write, targets)
        except RecordWriteError as err:
            raise RecordWriteError(f"{err}{''.join(f'; {k}' for k in kept)}") from None
        problems += errors
        hint = "" if record_path.parent == targets[0] else f" (move it into {targets[0]}/ as {names[0]})"
        kept.insert(0, f"the run record is at {record_path}{hint}")
    else:
        record_path = None
    if problems:
        raise RecordWriteError(f"could not write {'; '.join(problems)}; {'; '.join(kept)}")
    if record_path is not None:
        log.info("run record: %s", record_path)
    return record_path
