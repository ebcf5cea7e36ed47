"""The checks of a composed config before a run builds anything: the model fits the task and takes its keys, the CoDA
kernel names, the fast path's options, the optional packages its loggers need and their settings, the trainer's accelerator, devices,
strategy and precision, and a checkpoint to resume from is of this run (its task, model and weights).

Each raises a :class:`~coda_exp.errors.UserError` (``ConfigError``, ``CheckpointError``) naming the key or file;
``coda_exp.pipeline`` calls them in order, before any data loads (the weights' check once the model is built).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytorch_lightning as pl
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning_fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf

from coda_exp import extras
from coda_exp.checkpoint_avg import CheckpointError, load_checkpoint
from coda_exp.config_checks import ConfigError
from coda_exp.config_diff import configuration_changes
from coda_exp.environment import group_choice
from coda_exp.fast_step import FastOptions
from coda_exp.model_fit import misfit
from coda_exp.models.attconv_layers import injected_attention_problem
from coda_exp.node_keys import META_KEYS, accepted_keys, node_problems, unknown_model_keys  # noqa: F401 (API)
from coda_exp.precision_checks import FP16_MIXED, float16_weights_problem, float16_without_gpu
from coda_exp.resume_data import data_change
from coda_exp.run_folder import RESOLVED_CONFIG
from coda_exp.tasks.base import CHECKPOINT_CONFIG

log = logging.getLogger(__name__)


def check_compatible(cfg: DictConfig) -> None:
    """A clear error, before any data loads, for a model that cannot run a task (e.g. a seq2seq Transformer on
    SNLI), for ``model.*`` keys its class does not take (e.g. a preset's Transformer sizes on AttConv) and for an
    attention its options cannot take (AttConv's additive matching with ``model/attention=coda``); a ``_target_``
    that cannot be imported, or keys its class does not take, in the model's nodes, ``task.module``, ``data``, the
    optimizer and the schedule (``coda_exp.node_keys``)."""
    problem = misfit(cfg)
    if problem:
        raise ConfigError(problem)
    problems = node_problems(cfg)
    if problems:
        raise ConfigError("\n  ".join(["config nodes that cannot be built (fix the override or the YAML):",
                                        *problems.values()]))
    model = cfg.get("model") or {}
    injected = model.get("attention") is not None and isinstance(model.get("matching"), str)
    if injected and injected_attention_problem(model.matching):
        raise ConfigError(injected_attention_problem(model.matching))
    unknown = unknown_model_keys(cfg)
    if unknown:
        hint = _unknown_keys_hint(cfg, unknown)
        raise ConfigError(f"model={cfg.model.get('name')}: {', '.join(f'model.{k}' for k in unknown)} "
                         f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of "
                         f"{cfg.model._target_}{hint}")


def check_extras(cfg: DictConfig) -> None:
    """The optional packages the chosen loggers need (``coda_exp.extras``): one message naming the extra to install,
    before any data loads, not an ImportError from Lightning once the data is ready."""
    extras.require_loggers([c.get("_target_", "") for c in (cfg.get("logger") or {}).values() if c is not None])


def check_loggers(cfg: DictConfig) -> None:
    """The chosen loggers, before any data loads: the optional packages they need (:func:`check_extras`), then
    their settings (``coda_exp.logger_checks``: an online W&B's API key and server)."""
    from coda_exp.logger_checks import check_logger_settings

    check_extras(cfg)
    check_logger_settings(cfg)


def _unknown_keys_hint(cfg: DictConfig, unknown: list[str]) -> str:
    """Where the keys a model does not take came from: a group of another model's (``+model/attention=coda`` on a
    Transformer, whose attention is ``model/scoring``), or the preset's Transformer sizes (``preset=none``)."""
    from coda_exp.environment import config_dir

    groups = {p.name for p in (config_dir() / "model").iterdir() if p.is_dir()}
    foreign = [k for k in unknown if k in groups]
    if foreign:
        own = sorted(g for g in groups if g in cfg.model and g not in unknown)
        choice = group_choice(f"model/{foreign[0]}") or "..."
        instead = (f"; did you mean {' or '.join(f'model/{g}={choice}' for g in own)}?" if own
                   else "; leave it out")
        return f" (model={cfg.model.get('name')} has no model/{foreign[0]} group{instead})"
    preset = group_choice("preset")
    if preset in (None, "none"):
        return ""
    path = config_dir() / "preset" / f"{preset}.yaml"
    sized = set(OmegaConf.load(path).get("model") or {}) if path.is_file() else set()
    if sized and not sized & set(unknown):
        return ""
    return f" (preset={preset} sets Transformer sizes: add preset=none)"


def check_kernels(cfg: DictConfig) -> None:
    """The CoDA kernel names, at start-up: ``CODA_KERNEL`` and ``CODA_FLASH_BACKWARD`` (when set) and every ``kernel``
    option under ``model`` (``model.scoring.kernel``, ``model.attention.kernel``), and whether the kernel can run that node's options
    (``fused`` does not centre, ``flash`` only on CUDA); a ConfigError naming the key, the source and the choices."""
    from coda_exp.attention.dispatch import (
        capability_problem,
        configuration_error,
        cuda_capability,
        requested_kernel,
    )
    from coda_exp.attention.flash_spec import backward_env_problem

    if problem := backward_env_problem():  # else a GPU run would refuse it at its first CoDA forward
        raise ConfigError(problem)

    nodes = {f"model.{k}": v for k, v in cfg.model.items() if isinstance(v, DictConfig)} if "model" in cfg else {}
    configured = {f"{path}.kernel": node for path, node in nodes.items() if "kernel" in node}
    for key, node in {None: None, **configured}.items():  # None first: CODA_KERNEL alone
        try:
            name, _ = requested_kernel("auto" if node is None else str(node.kernel))
        except ValueError as err:
            raise ConfigError(str(err) if key is None else f"{key}: {err}") from None
        centred = node is not None and bool(node.get("center_e", False) or node.get("center_n", False))
        refused = configuration_error(name, centred)
        if refused:
            raise ConfigError(f"{key}: {refused}")
        accelerator = str(cfg.get("trainer", {}).get("accelerator", "auto"))
        where = key if key is not None else "CODA_KERNEL"
        if name == "flash" and centred and accelerator == "cpu":  # flash centres in CUDA self-attention only
            raise ConfigError(f"{where}: CoDA option kernel 'flash' centres "
                              "(center_e / center_n) on CUDA only, and this run is on the CPU "
                              "(trainer.accelerator=cpu): use 'auto' or a materialising kernel")
        if name == "flash" and accelerator != "cpu" and torch.cuda.is_available():  # its first forward would refuse
            precision = str(cfg.get("trainer", {}).get("precision", "32"))
            if problem := capability_problem(cuda_capability(torch.device("cuda")), precision.startswith("bf16")):
                raise ConfigError(f"{where}: CoDA option kernel 'flash' cannot "
                                  f"run on this GPU ({torch.cuda.get_device_name()}): {problem}; use 'auto' (the "
                                  "chunked kernel there)")


# what Lightning raises for settings it cannot run: an unknown precision or accelerator, more devices than the machine
# has, a strategy's missing package, a key the Trainer does not take (+trainer.foo=1)
_TRAINER_ERRORS = (MisconfigurationException, ValueError, TypeError, ImportError)


def check_trainer(cfg: DictConfig) -> None:
    """The ``trainer`` settings a run's Trainer is built from, checked by Lightning itself before any data loads: a
    throwaway Trainer of the same settings (no logger, callbacks or checkpoints), its error as a ConfigError."""
    if "_target_" not in cfg.get("trainer", {}):
        return
    saving = [f"callbacks.{name}" for name, c in (cfg.get("callbacks") or {}).items()
              if c is not None and str(c.get("_target_", "")).endswith(("ModelCheckpoint", "LastCheckpoint"))]
    if cfg.trainer.get("enable_checkpointing", True) is False and saving:
        raise ConfigError(f"trainer.enable_checkpointing=false, but the run's checkpoint callbacks ({', '.join(saving)}) "
                          f"save checkpoints: leave them out too ({' '.join(f'{k}=null' for k in saving)}); the run "
                          "then tests its last weights and cannot be resumed")
    with quiet_lightning():
        trainer = checked_trainer(lambda: instantiate(cfg.trainer, logger=False, callbacks=[], enable_checkpointing=False,
                                                      enable_progress_bar=False, enable_model_summary=False), cfg.trainer)
    requested = str(cfg.trainer.get("precision", "32-true"))
    if requested in FP16_MIXED and str(trainer.precision) != "16-mixed":
        # Lightning runs it as bf16-mixed with a warning on stderr only; the record would say 16-mixed, with a
        # fingerprint of its own, for a computation that is bf16-mixed's bit for bit
        raise ConfigError(float16_without_gpu(requested, trainer, "run"))
    if requested == "16-true" and (problem := float16_weights_problem(cfg.get("optimizer"))):
        raise ConfigError(problem)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if trainer.accelerator.__class__.__name__ == "CPUAccelerator" and trainer.num_devices > cores:
        log.warning("trainer.devices=%d on the CPU: %d DDP processes on a machine with %d cores share them (each "
                    "slower than one run); Lightning takes any number of CPU processes", trainer.num_devices,
                    trainer.num_devices, cores)


@contextlib.contextmanager
def quiet_lightning():
    """No log lines or warnings while a throwaway Trainer is built (the real one says them once, in its run's log)."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def checked_trainer(build: Callable[[], pl.Trainer], settings: DictConfig) -> pl.Trainer:
    """``build()``, with what Lightning refuses in ``settings`` (``cfg.trainer``) as one ConfigError naming the
    settings, and a GPU accelerator on a machine where torch finds no CUDA device said as such."""
    accelerator = str(settings.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        build_ = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ConfigError(f"trainer.accelerator={accelerator}: torch finds no CUDA GPU on this machine (torch "
                          f"{torch.__version__}, {build_}"
                          f"{'' if visible is None else f', CUDA_VISIBLE_DEVICES={visible!r}'}): run it on a GPU "
                          "machine, or on the CPU with trainer=cpu")
    try:
        return build()
    except (InstantiationException, *_TRAINER_ERRORS) as err:
        cause = err.__cause__ if isinstance(err, InstantiationException) else err
        if not isinstance(cause, _TRAINER_ERRORS):
            raise
        keys = ", ".join(f"{k}={settings.get(k)}" for k in ("accelerator", "devices", "strategy", "num_nodes",
                                                              "precision") if settings.get(k) is not None)
        message = " ".join(str(cause).split())
        raise ConfigError(f"trainer ({keys}): Lightning refuses these settings: {message}") from None


# Lightning's refusal of a limit_{train,val,test}_batches fraction of less than one batch (``_parse_num_batches``)
_TOO_FEW_BATCHES = re.compile(r"You requested to check (?P<limit>\S+) of the `(?P<stage>\w+)_dataloader` but "
                              r"\S+ \* (?P<length>\d+) < 1")
_STAGE_SPLITS = {"train": "training", "val": "validation", "test": "test", "predict": "prediction"}


@contextlib.contextmanager
def batch_limits():
    """Around ``trainer.fit`` / ``validate`` / ``test``: Lightning's refusal of a ``trainer.limit_*_batches``
    fraction smaller than one batch of its loader (known only once the loaders exist, this process's share under
    DDP) as one ConfigError naming the key, the loader's batches and the smallest fraction that works, not a
    traceback after the data has loaded."""
    try:
        yield
    except MisconfigurationException as err:
        found = _TOO_FEW_BATCHES.search(str(err))
        if found is None:
            raise
        raise _too_few_batches(found["stage"], found["limit"], int(found["length"]), _distributed()) from None


def _too_few_batches(stage: str, limit, length: int, share: bool = False) -> ConfigError:
    key, whose = f"trainer.limit_{stage}_batches", ", this process's share" if share else ""
    return ConfigError(f"{key}={limit} keeps no batch of the {_STAGE_SPLITS.get(stage, stage)} loader's {length}"
                       f"{whose} ({limit} x {length} < 1): use at least {key}={smallest_fraction(length)}, or a count "
                       f"of batches ({key}=1)")


def check_eval_batch_limits(trainer: pl.Trainer, datamodule, test: bool = True) -> None:
    """Before training: a ``trainer.limit_val_batches`` (with ``test``, ``limit_test_batches``) fraction that keeps no
    batch of the validation (test) loaders, as :func:`batch_limits` says it, where Lightning found it only at that
    stage: the test after the whole training, a validation after a training epoch when the sanity check is off. One
    process only: under DDP a rank's share is known once Lightning shards the loaders (:func:`batch_limits` then)."""
    if trainer.world_size > 1:
        return
    for stage, loaders in (("val", datamodule.val_dataloader), ("test", datamodule.test_dataloader if test else None)):
        limit = getattr(trainer, f"limit_{stage}_batches", 1.0)
        if loaders is None or not isinstance(limit, float) or not 0.0 < limit < 1.0:
            continue
        built = loaders()
        for loader in built if isinstance(built, (list, tuple)) else [built]:
            try:
                length = len(loader)
            except TypeError:  # an endless loader: Lightning's own rule
                continue
            if length and int(length * limit) < 1:
                raise _too_few_batches(stage, limit, length)


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def smallest_fraction(length: int) -> float:
    """The smallest fraction of ``length`` batches with two significant digits (1/3: 0.34) of which Lightning keeps
    at least one batch (``int(length * fraction) >= 1``)."""
    digits = math.ceil(math.log10(10 * max(length, 1)))
    fraction = math.ceil(10 ** digits / length) / 10 ** digits
    while int(length * fraction) < 1:  # float rounding
        fraction += 10 ** -digits
    return min(fraction, 1.0)


def fast_options(cfg: DictConfig) -> FastOptions | None:
    """The fast path's options (``trainer=gpu_fast`` sets ``fast``), None on the plain path; a ConfigError
    naming the key for a bad value, or for a trainer setting the fast step cannot train with
    (:func:`fast_trainer_problem`)."""
    node = cfg.get("fast")
    try:
        options = FastOptions.from_config(None if node is None else OmegaConf.to_container(node, resolve=True))
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    problem = None if options is None else fast_trainer_problem(cfg.get("trainer") or {})
    if problem:
        raise ConfigError(problem)
    return options


def fast_trainer_problem(trainer: DictConfig | dict) -> str | None:
    """What the fast path (manual optimization through ``FastStep``) cannot train with in the ``trainer`` settings,
    as one message, else None: ``precision=16-mixed``, whose GradScaler would unscale gradients the fast step never
    scaled (its backward and clipping run inside the captured step), and gradient accumulation, which Lightning
    refuses for manual optimization (after the data has loaded)."""
    precision = str(trainer.get("precision", "32-true"))
    if precision in FP16_MIXED:
        return (f"trainer.precision={precision} with the fast path (trainer=gpu_fast): the fast step does not scale "
                "its loss (float16's GradScaler), so its first optimizer step would fail; use "
                "trainer.precision=bf16-mixed (or bf16-true), or the plain path (trainer=gpu) for float16")
    accumulate = trainer.get("accumulate_grad_batches", 1)
    if isinstance(accumulate, int) and not isinstance(accumulate, bool) and accumulate > 1:
        return (f"trainer.accumulate_grad_batches={accumulate} with the fast path (trainer=gpu_fast): it steps the "
                "optimizer itself (manual optimization), which Lightning does not accumulate; raise "
                "data.batch_size instead, or train on the plain path (trainer=gpu)")
    return None


def check_same_run(cfg: DictConfig, folder: Path | None, ckpt: dict | None = None) -> None:
    """Before a resumed run claims its checkpoint's folder: the checkpoint must be of this run's task and model
    (read from the folder's ``config_resolved.yaml``, or where that was deleted or cannot be read from the config
    the checkpoint ``ckpt`` carries); a CheckpointError naming the file otherwise, so another run's folder is never taken over (its
    owner, log and configs stay as they are)."""
    if folder is None:
        return
    source, theirs, why = folder / RESOLVED_CONFIG, None, f"has no {RESOLVED_CONFIG} (deleted?)"
    if source.is_file():
        try:
            theirs = OmegaConf.load(source)
        except Exception as err:  # noqa: BLE001 - cut short or hand-edited: the checkpoint's config stands in
            why = f"has a {RESOLVED_CONFIG} that cannot be read ({str(err).splitlines()[0] if str(err) else err!r})"
    if theirs is None and ckpt is not None and isinstance(ckpt.get(CHECKPOINT_CONFIG), dict):
        theirs, source = OmegaConf.create(ckpt[CHECKPOINT_CONFIG]), Path(cfg.ckpt_path)
        log.warning("%s %s: the run's config is read from %s; the resumed run writes it again", folder, why, source)
    if theirs is None:
        return
    mine = {"task": cfg.task.name, "model": cfg.model.name}
    other = {"task": OmegaConf.select(theirs, "task.name"), "model": OmegaConf.select(theirs, "model.name")}
    if other != mine:
        raise CheckpointError(f"{cfg.ckpt_path}: a checkpoint of task={other['task']} model={other['model']} "
                              f"(its run's {source}); this run is task={mine['task']} "
                              f"model={mine['model']}: resume a checkpoint of the same task and model")


def check_same_configuration(cfg: DictConfig, ckpt: dict) -> None:
    """A checkpoint resumed with ``ckpt_path=`` was trained with this run's configuration (:func:`configuration_changes`
    of the config it carries; a longer budget is allowed): else a CheckpointError naming the keys that differ, so a
    run never goes on under another configuration than its record would state; another ``data.dir`` counts where it
    holds other files (``coda_exp.resume_data``: a relocated data folder or checkout resumes). ``resume=force``
    resumes it anyway (said in the log); a checkpoint without its config (written before they carried it) is not
    compared."""
    trained = ckpt.get(CHECKPOINT_CONFIG)
    if not isinstance(trained, dict):
        return
    if trained.get("threads") != cfg.get("threads"):  # a location key, yet CPU results depend on it
        log.warning("ckpt_path=%s was trained with threads=%s, this run has threads=%s: the steps from here on are "
                    "computed otherwise than the uninterrupted run's (its record states threads=%s)", cfg.ckpt_path,
                    trained.get("threads"), cfg.get("threads"), cfg.get("threads"))
    changed, data = configuration_changes(cfg, trained), data_change(cfg, ckpt, trained)
    if not changed and data is None:
        return
    theirs = OmegaConf.create(trained)
    shown = "; ".join([*([data] if data else []), *(f"{k}: {OmegaConf.select(theirs, k, default='(absent)')} there, "
                                                   f"{OmegaConf.select(cfg, k, default='(absent)')} here"
                                                   for k in changed[:4])])
    more = f" (and {len(changed) - 4} more)" if len(changed) > 4 else ""
    if cfg.get("resume") == "force":
        log.warning("ckpt_path=%s was trained with another configuration (%s%s); resume=force: resuming it under "
                    "this run's", cfg.ckpt_path, shown, more)
        return
    raise CheckpointError(f"{cfg.ckpt_path}: trained with another configuration than this run's ({shown}{more}): "
                          "resume it with the overrides it was trained with (a longer budget, task.epochs or "
                          "task.max_steps, may differ), start a new run without ckpt_path, or add resume=force to "
                          "go on under this configuration")


def check_checkpoint_fits(ckpt_path: str, task: pl.LightningModule) -> None:
    """The checkpoint's weights are the built model's (same names, same shapes): else a CheckpointError naming the
    file and the first differences, before training (a checkpoint outside a run folder has no config to compare)."""
    state = load_checkpoint(ckpt_path, mmap=True, verify=True)["state_dict"]  # (a damaged file: said, not trained on)
    mine = task.state_dict()
    missing, unexpected = sorted(set(mine) - set(state)), sorted(set(state) - set(mine))
    shapes = sorted(k for k in set(mine) & set(state) if tuple(mine[k].shape) != tuple(state[k].shape))
    if missing or unexpected or shapes:
        parts = [f"{label}: {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''} ({len(keys)})"
                 for label, keys in (("missing", missing), ("unexpected", unexpected), ("other shapes", shapes))
                 if keys]
        raise CheckpointError(f"{ckpt_path}: its weights do not fit this run's model ({'; '.join(parts)}): "
                              "resume a checkpoint of the same task, model and configuration")
