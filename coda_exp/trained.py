"""A trained model back from its checkpoint, for ``coda-exp eval`` and ``coda-exp predict`` (:mod:`coda_exp.evaluate`).

The command line is ``key=value`` overrides, sorted into three kinds (:func:`coda_exp.eval_args.parse`):

- the command's own keys: ``ckpt_path`` (both), ``split`` (eval), ``input`` and ``output`` (predict);
- this machine's settings, composed from ``configs/`` as a training run composes them (:data:`ENVIRONMENT`):
  ``paths.*``, ``logger=...``, ``trainer=...`` and their keys, ``threads``, ``save_record``, ``save_predictions``,
  ``imports`` (your own modules: the checkpoint's unless given);
- changes to the trained run's configuration (``data.dir=...``, ``data.eval_batch_size=64``,
  ``task.module.decoding.beam_size=8``): applied to the configuration the checkpoint carries (a ``+key=`` that adds
  a key nothing reads while the configuration has one of that name elsewhere is refused, as for training). Its task,
  model, seed and scale are the checkpoint's: ``task=``, ``model=``, ``seed=`` ... are refused (naming keys of its
  configuration to change instead: a ranking model has no ``task.module.decoding``), and so is a
  ``model.*`` key (the weights fit the trained model only), but ``model.*.kernel`` (how CoDA is computed).
  A bare argument (a path without ``ckpt_path=``) is refused with the key it was likely meant for.

The configuration: the one the checkpoint carries (every checkpoint since the run config rode along), else the
``config_resolved.yaml`` of the run folder it lies in. Its paths are the training machine's; this machine's paths
replace them, and a data folder that does not exist here but lay under the training checkout is looked for under
this one (a moved checkout). The precision is the checkpoint's unless ``trainer.precision=`` says otherwise
(float16 mixed precision without a GPU: float32, said in one line, :func:`_float16_without_gpu`).

The data module gets the checkpoint's tokenizers (``coda_exp.data.common.encoders``; a checkpoint from before they
were saved rebuilds them from its training files), so another folder's text is read with the ids the model knows.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch
import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from coda_exp import plugins, run_folder
from coda_exp.checkpoint_avg import CheckpointError, load_checkpoint
from coda_exp.config_checks import ConfigError, check_config, yaml_error
from coda_exp.config_keys import appended_key_problems, local_key_problems
from coda_exp.config_nodes import anchor_paths
from coda_exp.data.common.errors import DataError
from coda_exp.environment import trained_root_here
from coda_exp.eval_args import ENVIRONMENT, Invocation, parse, refusal  # noqa: F401 (parse: this module's API)
from coda_exp.instantiation import instantiate  # a UserError a constructor raises stays one
from coda_exp.optim import schedule_node
from coda_exp.precision_checks import FP16_MIXED, float16_without_gpu, no_gpu_for_float16
from coda_exp.run_checks import META_KEYS, checked_trainer, quiet_lightning
from coda_exp.run_folder import RESOLVED_CONFIG
from coda_exp.tasks.base import CHECKPOINT_CONFIG, CHECKPOINT_DATA, CHECKPOINT_RUN

log = logging.getLogger(__name__)

def checkpoint_config(path: Path, ckpt: dict) -> DictConfig:
    """The trained run's resolved configuration (module docstring)."""
    if CHECKPOINT_CONFIG in ckpt:
        return OmegaConf.create(ckpt[CHECKPOINT_CONFIG])
    folder_config = path.resolve().parent.parent / RESOLVED_CONFIG
    if path.resolve().parent.name == "periodic":
        folder_config = path.resolve().parent.parent.parent / RESOLVED_CONFIG
    if not folder_config.is_file():
        raise CheckpointError(f"{path}: carries no run config and no {RESOLVED_CONFIG} lies in its run folder "
                              f"({folder_config}); it was not written by a coda-exp training run")
    return OmegaConf.load(folder_config)


def compose_environment(inv: Invocation, scale: str | None = None) -> DictConfig:
    """This machine's ``paths``, ``logger``, ``trainer``... composed from ``configs/`` with the command's overrides,
    at the trained run's ``scale`` when it is an option of the scale group (``scale=fixture`` keeps its records out
    of the tracked ``results/``, as the training run did)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from coda_exp.environment import config_dir

    GlobalHydra.instance().clear()
    group = [f"scale={scale}"] if scale and (config_dir() / "scale" / f"{scale}.yaml").is_file() else []
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
            cfg = compose("train", overrides=[*group, *inv.environment])
            problems = local_key_problems(cfg, [*group, *inv.environment], lambda o: compose("train", overrides=o))
    except HydraException as err:
        message = " ".join(str(err).split()).split(" Config search path")[0]
        raise ConfigError(f"coda-exp {inv.mode}: {message}") from None
    except yaml.YAMLError as err:
        raise yaml_error(err) from None
    finally:
        GlobalHydra.instance().clear()
    if problems:
        raise ConfigError("\n  ".join(problems))
    return cfg


def _relocated(data_dir: str | None, trained_root: str | None, root: str) -> str | None:
    """``data_dir`` under this checkout when it does not exist here but lay under the training one."""
    if not data_dir or Path(data_dir).exists() or not trained_root:
        return None
    try:
        rel = Path(data_dir).relative_to(trained_root)
    except ValueError:
        return None
    moved = Path(root) / rel
    return str(moved) if moved.exists() else None


def _results_in_checkout(trained_paths, environment: list[str]) -> dict[str, str]:
    """The trained run's results folders (``results_root``, and ``results_dir`` where an experiment put its records
    in a folder of its own, e.g. ``mlu_gate_ablation``) relative to its checkout (``outputs/fixture_results`` for a
    run on the fixtures, whatever its scale was called, e.g. ``experiment=quickstart``), unless the command names
    its own; a folder outside that checkout is left to this machine's settings."""
    root = trained_paths.get("root_dir")
    if not root or any(o.startswith(("paths.results_root=", "paths.results_dir=")) for o in environment):
        return {}
    out = {}
    for key in ("results_root", "results_dir"):
        try:
            out[key] = str(Path(str(trained_paths.get(key))).relative_to(root)) if trained_paths.get(key) else None
        except ValueError:  # outside the checkout: this machine's results folder
            out[key] = None
    if out.get("results_dir") == out.get("results_root"):  # the default: results_dir follows results_root
        out.pop("results_dir")
    return {k: v for k, v in out.items() if v is not None}


def build_config(inv: Invocation, trained: DictConfig) -> DictConfig:
    """The evaluation's config: the trained one, this machine's settings, the command's changes applied."""
    if message := refusal(inv, trained):
        raise ConfigError(message)
    root = (trained.get("paths") or {}).get("root_dir")
    if trained_root_here(root, inv.environment):  # beside the training's own records, not in the current folder
        inv.environment.insert(0, "paths.root_dir='{}'".format(str(root).replace("\\", "\\\\").replace("'", "\\'")))
    env = compose_environment(inv, trained.get("scale_name"))
    cfg = trained.copy()
    with open_dict(cfg):
        trained_paths = cfg.get("paths") or {}
        precision = cfg.get("trainer", {}).get("precision")
        cfg.paths = env.paths
        cfg.paths.output_dir = None  # the command sets its own folder
        for key, kept in _results_in_checkout(trained_paths, inv.environment).items():  # where the training's went
            cfg.paths[key] = str(Path(str(OmegaConf.select(cfg, "paths.root_dir"))) / kept)
        for key in ENVIRONMENT[1:]:  # imports: the checkpoint's, unless the command gives others (relative paths)
            if key != "imports" or any(o.lstrip("+~").split("=")[0] == "imports" for o in inv.environment):
                cfg[key] = env.get(key)
        if precision is not None and not any(o.startswith("trainer.precision=") for o in inv.environment):
            cfg.trainer.precision = precision  # evaluated as it was tested
        cfg.ckpt_path, cfg.fast, cfg.callbacks = None, None, None
        if "cache_dir" in cfg.data:
            cfg.data.cache_dir = str(env.paths.cache_dir)
        moved = _relocated(cfg.data.get("dir"), trained_paths.get("root_dir"), str(cfg.paths.root_dir))
        if moved is not None:
            log.info("data.dir %s does not exist here: reading %s (the same place under this checkout)",
                     cfg.data.dir, moved)
            cfg.data.dir = moved
        for o in inv.config:
            key = o.key_or_group
            added = o.is_add() or o.is_force_add()
            if not added and OmegaConf.select(cfg, key, default="__absent__") == "__absent__":
                raise ConfigError(f"coda-exp {inv.mode}: {o.input_line}: the checkpoint's configuration has no "
                                  f"key {key!r} (prefix + to add one)")
            try:
                OmegaConf.update(cfg, key, o.value(), merge=True, force_add=True)
            except OmegaConfBaseException as err:
                raise ConfigError(f"coda-exp {inv.mode}: {o.input_line}: {' '.join(str(err).split())[:200]}") from None
    appended = [(o.key_or_group, o.input_line) for o in inv.config if o.is_add() and not o.is_force_add()]
    problems = appended_key_problems(cfg, appended) if appended else []
    if problems:  # +task.decoding.beam_size=1: a key nothing reads, refused as training refuses it
        raise ConfigError(f"coda-exp {inv.mode}: " + "\n  ".join(problems))
    return cfg


def _strip(node: dict) -> dict:
    return {k: (_strip(v) if isinstance(v, dict) else v) for k, v in node.items() if k not in META_KEYS}


@dataclass
class Prepared:
    """A checkpoint read and its evaluation config built: what is checked before any data loads."""

    inv: Invocation
    path: Path
    checkpoint: dict
    trained_config: DictConfig
    cfg: DictConfig
    warnings: list[str] = field(default_factory=list)  # for the evaluation's record (its ``warnings``)

    @property
    def identity(self) -> dict | None:
        """The run that wrote the checkpoint (``coda_exp.run_record.run_identity``); None for an older one."""
        return self.checkpoint.get(CHECKPOINT_RUN)


def prepare(inv: Invocation) -> Prepared:
    """Read the checkpoint (one line naming a corrupt or foreign file), build the evaluation's config and check its
    trainer settings (a ConfigError before any data loads)."""
    path = inv.ckpt_path
    ckpt = load_checkpoint(path, need=("state_dict",))
    trained = checkpoint_config(path, ckpt)
    cfg = build_config(inv, trained)
    anchor_paths(cfg)  # an imports= path of the command, absolute as the training's are
    plugins.load(cfg, hint=f" (the checkpoint's imports: coda-exp {inv.mode} imports=[...] gives others; or PYTHONPATH)")
    if inv.config:  # the command's changes get the training run's value checks (data.eval_batch_size=0 ...)
        check_config(cfg)
    with quiet_lightning():
        trainer = trainer_for(cfg, None)  # Lightning's check of the trainer settings, before any data loads
    notes = [note] if (note := _float16_without_gpu(inv, cfg, trainer)) else []
    t = cfg.trainer
    if (t.get("devices", 1) not in (1, "1", "auto", None) or t.get("num_nodes", 1) not in (1, None)
            or "ddp" in str(t.get("strategy", ""))):  # trainer=ddp, trainer.devices=4: said, not silently dropped
        log.warning("evaluation runs on one device: the trainer's devices=%s, num_nodes=%s and strategy=%s are not "
                    "used", t.get("devices"), t.get("num_nodes", 1), t.get("strategy", "auto"))
    return Prepared(inv, path, ckpt, trained, cfg, notes)


def _float16_without_gpu(inv: Invocation, cfg: DictConfig, trainer) -> str | None:
    """``trainer.precision=16-mixed`` where the evaluation has no GPU, which Lightning's ``trainer`` runs in another
    precision (bf16-mixed, with a warning only): given on the command line, a ConfigError in training's words
    (``precision_checks.float16_without_gpu``); the
    checkpoint's own precision, the evaluation runs in 32-true instead, said in one line (returned for the record):
    float32 holds every float16 value, so it comes closer to the float16 computation than bfloat16's 8-bit
    mantissa would (float16's is 11)."""
    requested, runs_as = str(cfg.trainer.get("precision")), str(trainer.precision)
    if requested not in FP16_MIXED or runs_as == "16-mixed":
        return None
    if any(o.startswith("trainer.precision=") for o in inv.environment):
        raise ConfigError(f"coda-exp {inv.mode}: {float16_without_gpu(requested, trainer, 'evaluation')}")
    device = no_gpu_for_float16(trainer, "evaluation")
    cfg.trainer.precision = "32-true"
    note = (f"the checkpoint trained with trainer.precision={requested}, which needs a GPU, and {device}: evaluating "
            f"in 32-true (float32 holds every float16 value; Lightning would substitute {runs_as}, which rounds "
            f"more); trainer.precision={runs_as} evaluates in that"
            + (", trainer=gpu in float16" if torch.cuda.is_available() else ""))
    log.warning(note)
    return note


def data_module(prep: Prepared):
    """The data module of the evaluation's config, with the checkpoint's tokenizers (not set up)."""
    datamodule = instantiate(prep.cfg.data)
    state = prep.checkpoint.get(CHECKPOINT_DATA)
    if state is not None:
        datamodule.restore_encoders(state)
    return datamodule


def build(prep: Prepared, datamodule, build_splits: bool) -> pl.LightningModule:
    """The task module with the checkpoint's weights, in eval mode. The data module's splits are read when
    ``build_splits`` (evaluation: the ones of its ``split=``, with the checkpoint's tokenizers), and always for a
    checkpoint without saved tokenizers (rebuilt from its training files: a missing one is said so)."""
    cfg, path = prep.cfg, prep.path
    if build_splits or datamodule.restored is None:
        if not build_splits:
            log.warning("%s carries no tokenizers (written before they were saved): rebuilding them from the training "
                        "data in %s", path, cfg.data.get("dir"))
        split = str(prep.inv.command.get("split") or "all")
        datamodule.only_splits = ("validation", "test") if split == "all" else (split,)
        try:
            datamodule.setup("fit")
        except DataError as err:
            if datamodule.restored is not None:
                raise
            raise DataError(f"{path} carries no tokenizers (written before checkpoints saved them), so they are "
                            f"rebuilt from the training data, which needs the training files as well as the split "
                            f"read: {err}") from None
    net = instantiate(_strip(OmegaConf.to_container(cfg.model, resolve=True)), **datamodule.model_kwargs())
    kwargs = datamodule.task_kwargs()
    if kwargs.get("evaluations") and kwargs.get("targets") is None:
        kwargs["evaluations"] = []  # predict: no references to score the hypotheses against
    scheduler = instantiate(node) if (node := schedule_node(cfg)) is not None else None
    task = instantiate(cfg.task.module, model=net, optimizer=instantiate(cfg.optimizer), scheduler=scheduler,
                       **kwargs)
    try:
        task.load_state_dict(prep.checkpoint["state_dict"])
    except RuntimeError as err:
        lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
        raise CheckpointError(f"{path}: its weights do not fit the model rebuilt from its configuration "
                              f"({(lines[1] if len(lines) > 1 else lines[0])[:300]}); with data.* changed, the "
                              f"vocabulary may differ from the one the model was trained on") from None
    return task.eval()


def trainer_for(cfg: DictConfig, folder: Path | None, loggers: list | None = None,
                checkpoint: dict | None = None) -> pl.Trainer:
    """A one-device trainer of the evaluation's ``trainer`` settings (accelerator, precision): no training, no
    checkpoints, no sanity steps (what Lightning refuses in them: a ConfigError, ``run_checks.checked_trainer``).
    With ``loggers`` and the ``checkpoint`` evaluated: its training loop's state, so that the metrics are logged at
    the checkpoint's step and epoch, as its training logged them (they were logged at step 0)."""
    t = cfg.trainer
    trainer = checked_trainer(lambda: pl.Trainer(
        accelerator=t.get("accelerator", "auto"), devices=1, num_nodes=1, precision=t.get("precision", "32-true"),
        logger=loggers or False, enable_checkpointing=False, default_root_dir=str(folder) if folder else None,
        deterministic=t.get("deterministic", False), limit_val_batches=t.get("limit_val_batches"),
        limit_test_batches=t.get("limit_test_batches"), enable_model_summary=False, inference_mode=True), t)
    loop = ((checkpoint or {}).get("loops") or {}).get("fit_loop")
    if loggers and isinstance(loop, dict):
        try:
            trainer.fit_loop.load_state_dict(loop)
        except (KeyError, TypeError, ValueError, AttributeError) as err:  # another Lightning's loops: step 0
            log.warning("the checkpoint's training loop state cannot be read (%s): its metrics are logged at "
                        "step 0", err)
    return trainer


def checkpoint_epochs(ckpt: dict) -> int:
    """The epochs a checkpoint's weights trained in, counted as a training record counts its run's (``epochs``:
    Lightning's ``current_epoch`` once ``fit`` ends, the last epoch counted where a step budget or a stop ended it
    part way): the checkpoint's 0-based ``epoch``, plus one where a batch of that epoch trained (its loop progress;
    else, without loops, where it trained any step). A run's last checkpoint thus says the record's ``epochs``."""
    epoch = int(ckpt.get("epoch", 0))
    progress = ((ckpt.get("loops") or {}).get("fit_loop") or {}).get("epoch_loop.batch_progress")
    if isinstance(progress, dict):
        trained = int((progress.get("current") or {}).get("completed", 0)) > 0
    else:
        trained = int(ckpt.get("global_step", 0)) > 0
    return epoch + 1 if trained else epoch


def same_folder(a: str | os.PathLike | None, b: str | os.PathLike | None) -> bool:
    """Whether two data folders are the same place (both None: the hub, or generated data)."""
    if a is None or b is None:
        return a is None and b is None
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def trained_run_state(prep: Prepared) -> str | None:
    """Where the training run that wrote the checkpoint stands, when the checkpoint lies in its run folder:
    ``finished`` or ``diverged`` (its record, in the trained run's or this machine's results folder), ``running``
    or ``not finished`` (stopped, or its record lost); None for a checkpoint outside a run folder (unknown)."""
    from coda_exp.auto_resume import finished_records

    folder = run_folder.resume_folder(prep.path)
    if folder is None:
        return None
    trained_results = (prep.trained_config.get("paths") or {}).get("results_dir")
    dirs = [d for d in (trained_results, prep.cfg.paths.results_dir) if d]
    done = finished_records(dirs, [folder.resolve()])
    if done:
        return str(done[folder.resolve()][1]["status"])
    state = "running" if run_folder.live_owner(folder) else "not finished"
    log.warning("%s: its training run (%s) has %s: this evaluation is of a partly trained model, and tables list "
                "it apart", prep.path, folder, "not finished yet" if state == "running" else "no finished record")
    return state
