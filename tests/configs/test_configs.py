"""Every file in configs/ composes, and what it describes instantiates."""

import importlib
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from coda_exp import pipeline
from tests import ROOT

CONFIGS = ROOT / "configs"
GROUP_FILES = sorted(p for p in CONFIGS.rglob("*.yaml")
                     if p.parent != CONFIGS and p.relative_to(CONFIGS).parts[0] not in ("tables", "local"))


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


TASKS, MODELS = options("task"), options("model")
COVERED: set[Path] = set()  # filled by the parametrisations below, checked by test_every_config_file_is_tested


def covers(group: str, names: list[str]) -> list[str]:
    COVERED.update(CONFIGS / group / f"{n}.yaml" for n in names)
    return names


covers("model/attention", options("model/attention"))  # every attention is the default of some model, or swapped in
covers("hydra", ["default"])  # composed by every test here (return_hydra_config)
covers("paths", ["default"])  # every output path of every test comes from it
covers("preset", options("preset"))  # chosen by the Transformer tasks, composed in test_task_model_builds
covers("model/scoring", options("model/scoring"))  # the Transformers' attention, default or swapped in


@pytest.mark.parametrize("task", covers("task", TASKS))
@pytest.mark.parametrize("model", covers("model", MODELS))
def test_task_model_builds(make_cfg, task, model):
    cfg = make_cfg(f"task={task}", f"model={model}", "scale=fixture")
    assert cfg.model.families, f"model/{model}.yaml must list the task families it serves"
    if cfg.task.family not in cfg.model.families:  # e.g. a seq2seq Transformer on SNLI: a clear error
        with pytest.raises(ValueError, match=f"model={model} does not fit task={task}"):
            pipeline.check_compatible(cfg)
        return
    dm = instantiate(cfg.data)
    dm.setup()
    net = pipeline.build_model(cfg, dm)
    module = pipeline.build_task(cfg, net, dm)
    assert sum(p.numel() for p in module.parameters()) > 0
    assert cfg.task.name == task and cfg.model.name == model
    assert cfg.task.monitor.startswith("val/")


@pytest.mark.parametrize("attention", options("model/attention"))
def test_attention_swaps_from_the_command_line(make_cfg, attention):
    cfg = make_cfg("task=snli", f"model/attention={attention}", "scale=fixture")
    dm = instantiate(cfg.data)
    dm.setup()
    net = pipeline.build_model(cfg, dm)
    assert pipeline.attention_options(cfg)["name"] == attention
    assert type(net.attention).__name__.lower().startswith(attention.split("_")[0])


@pytest.mark.parametrize("trainer", covers("trainer", options("trainer")))
def test_trainer_instantiates(make_cfg, trainer):
    cfg = make_cfg(f"trainer={trainer}")
    # GPU configs are checked on CPU by swapping only the accelerator: every other key must be accepted
    extra = {} if trainer == "cpu" else {"accelerator": "cpu", "devices": 1, "strategy": "auto"}
    if "precision" in cfg.trainer:
        extra["precision"] = "32-true"
    tr = instantiate(cfg.trainer, **extra)
    assert tr.max_epochs == cfg.task.epochs


@pytest.mark.parametrize("logger", covers("logger", options("logger")))
def test_logger_instantiates(make_cfg, logger):
    cfg = make_cfg(f"logger={logger}")
    loggers = pipeline.build_loggers(cfg)
    assert len(loggers) == (0 if logger == "none" else 1)
    if logger == "wandb":
        assert cfg.logger.wandb.offline is True  # offline unless the user opts in
        assert loggers[0]._wandb_init["mode"] == "offline"


def test_wandb_online_opt_in_beats_the_offline_environment(make_cfg, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # what `make` exports
    (lg,) = pipeline.build_loggers(make_cfg("logger=wandb", "logger.wandb.offline=false"))
    assert lg._wandb_init["mode"] == "online"  # passed to wandb.init, which prefers it to WANDB_MODE


@pytest.mark.parametrize("callbacks", covers("callbacks", options("callbacks")))
def test_callbacks_instantiate(make_cfg, callbacks):
    cbs = pipeline.build_callbacks(make_cfg(f"callbacks={callbacks}"))
    names = {type(c).__name__ for c in cbs}
    assert {"ModelCheckpoint", "EarlyStopping", "RichProgressBar"} <= names


@pytest.mark.parametrize("group", ["debug", "scale", "experiment"])
def test_optional_groups_compose(make_cfg, group):
    for name in covers(group, options(group)):
        cfg = make_cfg(f"{group}={name}")
        assert OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
        if group == "scale":
            assert cfg.scale_name == name


@pytest.mark.parametrize("name", covers("task_scale", options("task_scale")))
def test_task_scales_compose(make_cfg, name):
    task, scale = name.rsplit("_", 1)
    assert task in TASKS and (CONFIGS / "scale" / f"{scale}.yaml").is_file(), f"task_scale/{name}.yaml: no such pair"
    cfg = make_cfg(f"task={task}", f"scale={scale}")
    assert OmegaConf.to_container(cfg, resolve=True) and cfg.scale_name == scale


@pytest.mark.parametrize("task", ["mlu", "algolisp", "iwslt15_envi"])
def test_cpu_scale_of_sequence_tasks_warms_up_early_to_the_presets_peak(make_cfg, task):
    """scale=cpu keeps each sequence task's step budget small and reaches the paper preset's peak learning rate
    early in it (the presets' 8000 / 16000 warm-up steps would never end in a CPU budget)."""
    import torch

    assert (CONFIGS / "task_scale" / f"{task}_cpu.yaml").is_file()
    paper, cpu = make_cfg(f"task={task}"), make_cfg(f"task={task}", "scale=cpu")

    def lr_curve(cfg, steps):
        opt = instantiate(cfg.optimizer)([torch.nn.Parameter(torch.zeros(1))])
        sched = instantiate(cfg.scheduler)(opt)
        return [sched.lr_lambdas[0](s) for s in steps]

    warmup, steps = cpu.scheduler.warmup_steps, cpu.task.max_steps
    assert steps <= 3000 and cpu.task.val_check_interval <= steps // 4 and warmup <= steps // 4
    peak = max(lr_curve(paper, [paper.scheduler.warmup_steps - 1]))  # the preset's peak, at its last warm-up step
    assert lr_curve(cpu, [warmup - 1])[0] == pytest.approx(peak, rel=1e-3)
    if task != "mlu":  # (MLU's generated epoch is 12M examples long)
        assert cpu.task.epochs == paper.task.epochs  # not scale=cpu's 3 epochs: the step budget decides
        assert cpu.data.max_eval_examples <= 1000


def test_every_table_experiment_sweeps_three_seeds(make_cfg):
    from hydra import compose, initialize_config_dir

    for name in options("experiment"):
        with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
            cfg = compose("train", overrides=[f"experiment={name}"], return_hydra_config=True)
        assert str(cfg.hydra.sweeper.params.seed).split(",") == ["1", "2", "3"], name


def test_launchers_compose(make_cfg):
    from hydra import compose, initialize_config_dir

    for launcher in covers("hydra/launcher", options("hydra/launcher")) + ["joblib", "submitit_local", "basic"]:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
            cfg = compose("train", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
        target = cfg.hydra.launcher._target_
        module, _, cls = target.rpartition(".")
        assert hasattr(importlib.import_module(module), cls), target


def test_paper_hyperparameters_are_in_yaml(make_cfg):
    cfg = make_cfg("task=wikiqa")
    assert cfg.optimizer.lr == 0.0003 and cfg.data.batch_size == 64 and cfg.task.epochs == 20
    assert cfg.model.hidden_size == 200 and cfg.model.dropout == 0.2
    assert make_cfg("task=snli").task.epochs == 50


def test_every_config_file_is_tested():
    # runs last in this module (pytest keeps file order): every group file must have been exercised above
    missing = [str(p.relative_to(CONFIGS)) for p in GROUP_FILES if p not in COVERED]
    assert not missing, f"config files with no test: {missing}"


@pytest.mark.parametrize("task,default", [("wikiqa", "answered"), ("trecqa", "clean"), ("udc", "raw")])
def test_ranking_eval_protocol_is_a_command_line_option(make_cfg, task, default):
    assert instantiate(make_cfg(f"task={task}").data).eval_protocol == default
    assert instantiate(make_cfg(f"task={task}", "data.eval_protocol=raw").data).eval_protocol == "raw"
