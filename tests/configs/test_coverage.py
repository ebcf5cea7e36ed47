"""Every file under configs/ is instantiated by a test: one parametrised case per file, dispatched on its group.
A new file of a known group is picked up by itself; a file of a new group fails until an exerciser is added."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import OmegaConf

from coda_exp import pipeline
from tests import FIXTURES, ROOT

CONFIGS = ROOT / "configs"
NOT_COMPOSED = ("tables", "local")  # table specs (tests/results) and each machine's git-ignored settings
GROUP_FILES = sorted(p.relative_to(CONFIGS) for p in CONFIGS.rglob("*.yaml")
                     if p.parent != CONFIGS and p.relative_to(CONFIGS).parts[0] not in NOT_COMPOSED)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


_CATALOG: dict = {}


def catalog(make_cfg) -> dict:
    """Each task's family and data base, each model's families, as their YAML files say (read once; composing
    each task and model took ~7 s in each test process). That a task composes with the data it names:
    ``test_config_file_instantiates``'s data files, built on a task naming them."""
    if _CATALOG:
        return _CATALOG
    from tests.configs.test_configs import _families, _task_node

    tasks = {}
    for t in options("task"):
        node = _task_node(t)
        (data,) = [d["/data"] for d in node["defaults"] if isinstance(d, dict) and "/data" in d]
        tasks[t] = (node["task"]["family"], data)
    _CATALOG.update(tasks=tasks, models={m: list(_families(m)) for m in options("model")})
    return _CATALOG


def partner_model(make_cfg, task: str) -> str:
    """The first model (by name) that serves the task's family and takes every key the task composes into it
    (imdb/sst's T2T preset sets Transformer sizes: AttConv does not serve them as they are)."""
    if task not in _PARTNERS:  # composed once per task and process
        family = catalog(make_cfg)["tasks"][task][0]
        _PARTNERS[task] = next(m for m, fams in catalog(make_cfg)["models"].items() if family in fams
                               and not pipeline.unknown_model_keys(make_cfg(f"task={task}", f"model={m}")))
    return _PARTNERS[task]


_PARTNERS: dict[str, str] = {}


def built(make_cfg, build, task: str, *overrides: str, model: str | None = None) -> dict:
    """Compose task x model (a model serving the task unless given) on the task's fixture files and build it."""
    model = model or partner_model(make_cfg, task)
    return build(make_cfg(f"task={task}", f"model={model}", "scale=fixture", *overrides,
                          f"data.dir={FIXTURES / task}"))


def ex_task(make_cfg, build, name):
    """Built with every model that serves it by test_configs.test_task_model_builds (one parameter per file)."""
    from tests.configs.test_configs import _task_model_pairs

    assert any(task == name for task, model in _task_model_pairs()
               if catalog(make_cfg)["tasks"][task][0] in catalog(make_cfg)["models"][model])


def ex_model(make_cfg, build, name):
    """Built on every task it serves by test_configs.test_task_model_builds; its class is the one it names."""
    from tests.configs.test_configs import _task_model_pairs

    assert any(model == name for task, model in _task_model_pairs()
               if catalog(make_cfg)["tasks"][task][0] in catalog(make_cfg)["models"][model])
    assert make_cfg(f"model={name}").model._target_.startswith("coda_exp.models.")


def ex_attention(make_cfg, build, name, group):
    model = "decompatt" if group == "model/attention" else "transformer"
    task = "snli" if group == "model/attention" else "mlu"
    run = built(make_cfg, build, task, f"{group}={name}", model=model)
    assert pipeline.attention_options(make_cfg(f"model={model}", f"{group}={name}"))["name"] == name
    assert run["model"] is not None


def ex_preset(make_cfg, build, name):
    """A Transformer preset on a Transformer task; `none` (no bundle) on a DecompAtt task."""
    task, model = ("snli", "decompatt") if name == "none" else ("mlu", "transformer")
    assert built(make_cfg, build, task, f"preset={name}", model=model)["optimizer"] is not None


def ex_data(make_cfg, build, name):
    task = next(t for t, (_, data) in catalog(make_cfg)["tasks"].items() if data == name)
    assert type(built(make_cfg, build, task)["data"]).__name__.endswith("DataModule")


def ex_scale(make_cfg, build, name):
    run = built(make_cfg, build, "snli", f"scale={name}")
    assert make_cfg(f"scale={name}").scale_name == name and run["trainer"] is not None


def ex_task_scale(make_cfg, build, name):
    task, scale = name.rsplit("_", 1)
    assert task in options("task") and scale in options("scale"), f"task_scale/{name}.yaml: no such task x scale"
    built(make_cfg, build, task, f"scale={scale}")
    assert make_cfg(f"task={task}", f"scale={scale}").scale_name == scale


def ex_experiment(make_cfg, build, name):
    make_cfg(f"experiment={name}", "scale=fixture")
    params = HydraConfig.get().sweeper.params or {}
    first = [f"{key}={str(value).split(',')[0]}" for key, value in params.items()]  # one job of the sweep
    cfg = make_cfg(f"experiment={name}", "scale=fixture", *first)
    assert OmegaConf.to_container(cfg, resolve=True) and build(cfg)["task"] is not None


def ex_group_option(group: str):
    """Groups swapped in on top of a fixture run: every object the run needs is built with the option."""
    def exercise(make_cfg, build, name):
        run = built(make_cfg, build, "snli", f"{group}={name}")
        if group == "logger":
            assert len(run["loggers"]) == (0 if name == "none" else 1)
    return exercise


def ex_launcher(make_cfg, build, name):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        cfg = compose("train", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    launcher = instantiate(OmegaConf.to_container(cfg.hydra.launcher, resolve=True))
    assert type(launcher).__name__ == cfg.hydra.launcher._target_.rpartition(".")[2]


def ex_hydra(make_cfg, build, name):
    cfg = make_cfg("task=snli")
    run_dir = OmegaConf.to_container(HydraConfig.get().run, resolve=True)["dir"]
    assert run_dir.startswith(cfg.paths.log_dir) and HydraConfig.get().job.name == "train"


def ex_paths(make_cfg, build, name):
    paths = OmegaConf.to_container(make_cfg(f"paths={name}").paths, resolve=True)
    assert all(isinstance(v, str) and v for v in paths.values())


EXERCISERS = {
    "task": ex_task, "model": ex_model, "data": ex_data, "scale": ex_scale, "task_scale": ex_task_scale,
    "experiment": ex_experiment, "hydra/launcher": ex_launcher, "hydra": ex_hydra, "paths": ex_paths,
    "model/attention": lambda m, b, n: ex_attention(m, b, n, "model/attention"),
    "model/scoring": lambda m, b, n: ex_attention(m, b, n, "model/scoring"),
    "preset": ex_preset,
    **{g: ex_group_option(g) for g in ("optimizer", "trainer", "logger", "callbacks", "debug")},
}


@pytest.mark.parametrize("path", GROUP_FILES, ids=str)
def test_config_file_instantiates(make_cfg, build, path: Path):
    group = str(path.parent)
    assert group in EXERCISERS, (f"configs/{path}: no test instantiates the files of group {group!r}; "
                                 "add its exerciser to EXERCISERS in tests/configs/test_coverage.py")
    EXERCISERS[group](make_cfg, build, path.stem)
