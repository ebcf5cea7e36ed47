"""A configured model outside a training run: a finished run's network back from its checkpoint
(:func:`load_trained`: ``coda-exp plot-coda``) and a run's data and task modules built from overrides without
training (:func:`build_offline`: ``coda-exp estimate``, the studies' scripts). Both build as a run builds
(:mod:`coda_exp.pipeline`'s ``build_*`` and checks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf

from coda_exp import console, plugins
from coda_exp.checkpoint_avg import load_checkpoint
from coda_exp.config_checks import check_config
from coda_exp.instantiation import instantiate
from coda_exp.pipeline import (
    build_data,
    build_model,
    build_task,
    check_compatible,
    check_kernels,
    check_trainer,
    fast_options,
)
from coda_exp.run_folder import RESOLVED_CONFIG
from coda_exp.tasks.base import CHECKPOINT_CONFIG, CHECKPOINT_DATA
from coda_exp.threads import pin_threads


def load_trained(checkpoint: str | os.PathLike, config: str | os.PathLike | None = None):
    """Rebuild (cfg, datamodule, network) of a finished run from a checkpoint. The config: ``config`` when given,
    else the one the checkpoint carries (every checkpoint since the run config rode along), else the
    ``config_resolved.yaml`` of the run folder the checkpoint lies in (``<run>/checkpoints/x.ckpt``)."""
    checkpoint = Path(checkpoint)
    ckpt = load_checkpoint(checkpoint)
    if config is None and CHECKPOINT_CONFIG in ckpt:
        cfg = OmegaConf.create(ckpt[CHECKPOINT_CONFIG])
    else:
        config = Path(config) if config else checkpoint.parent.parent / RESOLVED_CONFIG
        if not config.is_file():
            raise FileNotFoundError(f"no run config in {checkpoint} nor at {config}; pass the run's "
                                    f"{RESOLVED_CONFIG} explicitly")
        cfg = OmegaConf.load(config)
    plugins.load(cfg)  # the run's own modules (its ``imports``): its reader, before the data module looks it up
    datamodule = instantiate(cfg.data)
    datamodule.trained_weights = True  # its word vectors come from the checkpoint: no "randomly initialised" warning
    if ckpt.get(CHECKPOINT_DATA) is not None:  # the trained tokenizers, not ones rebuilt from the training files
        datamodule.restore_encoders(ckpt[CHECKPOINT_DATA])
    datamodule.setup("fit")
    net = build_model(cfg, datamodule)
    state = ckpt["state_dict"]
    net.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
    return cfg, datamodule, net.eval()


def build_offline(overrides: list[str], prefix: str = "coda-exp-",
                  trainer: bool = False) -> tuple[DictConfig, object, pl.LightningModule]:
    """(cfg, data module set up for fit, task module) of ``train.py <overrides>``, seeded, without training: outputs
    and results go to a fresh temporary folder and no logger is built. For scripts that time or inspect a configured
    run (``scripts/estimate_runtime.py``, ``scripts/studies/mlu/gate_at_init.py``); raises what a run would raise on a bad
    config (a config Hydra cannot compose, and the checks of :func:`run`; the trainer settings' with ``trainer``, for
    a caller that builds the config's Trainer) before any data is read."""
    import tempfile

    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import ConfigCompositionException, OverrideParseException
    from omegaconf import open_dict

    from coda_exp.config_checks import composition_error, yaml_error
    from coda_exp.environment import config_dir, set_environment

    set_environment()
    tmp = tempfile.mkdtemp(prefix=prefix)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
            cfg = compose("train", return_hydra_config=True, overrides=[
                f"paths.output_dir={tmp}/run", f"paths.log_dir={tmp}/outputs", f"paths.results_dir={tmp}/results",
                "logger=none", *overrides])
    except (ConfigCompositionException, OverrideParseException) as err:
        raise composition_error(err) from None
    except yaml.YAMLError as err:
        raise yaml_error(err) from None
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    check_config(cfg)
    console.configure(verbose=cfg.get("verbose", False))  # as a run: no datasets progress bars unless verbose=true
    fast_options(cfg)
    check_kernels(cfg)
    check_compatible(cfg)
    if trainer:
        check_trainer(cfg)
    pin_threads(cfg.get("threads"))
    pl.seed_everything(cfg.seed, workers=True)
    datamodule = build_data(cfg)
    datamodule.setup("fit")
    return cfg, datamodule, build_task(cfg, build_model(cfg, datamodule), datamodule)
