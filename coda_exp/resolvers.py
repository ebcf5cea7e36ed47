"""The configs' own OmegaConf resolvers, registered on import (by the entry point and by the pipeline)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import ListConfig, OmegaConf

from coda_exp import environment, run_tag


def select_as_in_run(cfg, key: str):
    """``key`` of a composed config (with its ``hydra`` section) resolved as in the run, where Hydra has set its
    config: a run folder's name reads ``${hydra:overrides.task}`` (its tag), which fails before Hydra starts
    otherwise. Hydra's own config is left as it was."""
    import copy

    from hydra.core.hydra_config import HydraConfig

    hydra, composed = HydraConfig.instance(), copy.deepcopy(cfg)
    saved = hydra.cfg
    try:
        hydra.set_config(composed)
        return OmegaConf.select(composed, key, throw_on_resolution_failure=True)
    finally:
        hydra.cfg = saved


def dir_if_exists(path: str) -> str | None:
    """``${dir_if_exists:PATH}``: PATH when it is a folder, else null. The data bases (configs/data/*.yaml) read
    ``data/<task>/`` when it holds the official files and otherwise leave ``data.dir`` null (the hub, or MLU's
    generator), so a run's resolved config records which folder it read."""
    return str(path) if path is not None and Path(path).is_dir() else None


def fixture_dir(task: str) -> str:
    """``${fixture_dir:TASK}``: the folder of TASK's fixture files, in the checkout (``tests/fixtures/TASK``) or in
    the installed package (``coda_exp/fixtures/TASK``), whatever the current folder (``configs/scale/fixture.yaml``)."""
    return str(environment.fixture_dir(task))


def run_tag_suffix(overrides) -> str:
    """``${run_tag:${hydra:overrides.task}}``: ``-<tag>`` naming the configuration a job's overrides chose, "" for a
    plain run (``configs/hydra/default.yaml``'s run and sweep job folders; :mod:`coda_exp.run_tag`). Each override
    as typed: an interpolation in one (``callbacks.x.dirpath=${paths.output_dir}``) is not resolved, as the folder
    it would name is not made yet."""
    if isinstance(overrides, ListConfig):
        overrides = OmegaConf.to_container(overrides, resolve=False)
    return run_tag.folder_suffix(overrides)


OmegaConf.register_new_resolver("dir_if_exists", dir_if_exists, replace=True)
OmegaConf.register_new_resolver("fixture_dir", fixture_dir, replace=True)
OmegaConf.register_new_resolver("run_tag", run_tag_suffix, replace=True)
