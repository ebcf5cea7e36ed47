"""A checkpoint's command line sorted into the command's keys, this machine's settings and changes of the trained
configuration; the evaluation's config built from the checkpoint's."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from coda_exp.config_checks import ConfigError
from coda_exp.trained import build_config, parse


def test_the_command_line_is_sorted():
    inv = parse("eval", ["ckpt_path=/a/b.ckpt", "split=test", "data.dir=/d", "trainer=gpu", "paths.log_dir=/l",
                         "logger=wandb", "task.module.decoding.beam_size=8", "+data.extra=1"])
    assert str(inv.ckpt_path) == "/a/b.ckpt" and inv.command["split"] == "test"
    assert inv.environment == ["trainer=gpu", "paths.log_dir=/l", "logger=wandb"]
    assert inv.config_strings() == ["data.dir=/d", "task.module.decoding.beam_size=8", "+data.extra=1"]
    assert parse("eval", ["ckpt_path=x", "model.scoring.kernel=torch"]).config_strings() == [
        "model.scoring.kernel=torch"]  # how CoDA is computed, not what: the same weights fit
    inv = parse("predict", ["ckpt_path=x.ckpt", "input=in.jsonl", "output=out.jsonl"])
    assert (inv.command["input"], inv.command["output"]) == ("in.jsonl", "out.jsonl")


@pytest.mark.parametrize("mode,args,message", [
    ("eval", ["split=all"], "ckpt_path=... is required"),
    ("eval", ["ckpt_path=x", "split=train"], "split=train: expected one of all, test, validation"),
    ("eval", ["ckpt_path=x", "input=y"], "input=y: input= is a key of coda-exp predict, not of eval"),
    ("predict", ["ckpt_path=x", "input=y", "split=test"], "split=test: split= is a key of coda-exp eval"),
    ("predict", ["ckpt_path=x"], "input=FILE is required"),
    ("eval", ["ckpt_path=x", "data.dir=[unclosed"], "coda-exp eval"),
    # a model change used to load the data, then blame data.* for weights that do not fit
    ("eval", ["ckpt_path=x", "model.hidden_size=64"], "model.hidden_size=64: the checkpoint's model is the trained one"),
    ("predict", ["ckpt_path=x", "input=y", "model.scoring.center_n=true"], "model.scoring.center_n=true: the "),
    # a bare path used to get Hydra's grammar error ("extraneous input '/'")
    ("eval", ["/runs/a/last.ckpt"], "/runs/a/last.ckpt: expected key=value; did you mean ckpt_path=/runs/a/last.ckpt?"),
    ("predict", ["ckpt_path=x", "new.jsonl"], "new.jsonl: expected key=value; did you mean input=new.jsonl?"),
    ("eval", ["ckpt_path=x", "oops"], "oops: expected key=value; coda-exp eval takes ckpt_path=, split= and"),
])
def test_what_cannot_be_given_is_named(mode, args, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse(mode, args)


@pytest.mark.parametrize("task,args,message", [
    ("snli", ["seed=3"], "seed=3: the checkpoint's seed is the trained run's"),
    ("snli", ["~data.dir"], "the checkpoint's data is the trained run's"),
    ("snli", ["hydra.run.dir=/x"], "the checkpoint's hydra"),
    # the hint named task.module.decoding.beam_size, which only a beam-search (IWSLT) checkpoint has
    ("wikiqa", ["task=snli"], "change a key of its configuration instead (data.dir=..., data.eval_batch_size=...),"),
    ("iwslt15_envi", ["model=transformer"], "instead (data.dir=..., task.module.decoding.beam_size=...),"),
    ("mlu", ["task=snli"], "instead (data.dir=..., task.module.decoding.strategy=...),"),
])
def test_a_group_or_top_key_is_refused_naming_keys_the_checkpoint_has(make_cfg, task, args, message):
    trained = OmegaConf.create(OmegaConf.to_container(make_cfg(f"task={task}", "scale=fixture"), resolve=True))
    inv = parse("eval", ["ckpt_path=x", *args])  # set aside until the checkpoint's configuration is read
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_config(inv, trained)


def test_the_config_is_the_checkpoints_with_this_machines_paths(make_cfg, tmp_path, monkeypatch):
    trained = make_cfg("task=snli", "scale=fixture", "trainer.precision=bf16-mixed")
    resolved = OmegaConf.create(OmegaConf.to_container(trained, resolve=True))
    resolved.paths.root_dir = "/gone/checkout"  # trained elsewhere: its data folder lay under that checkout
    resolved.data.dir = "/gone/checkout/tests/fixtures/snli"
    resolved.data.cache_dir = "/gone/cache"
    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path))
    (tmp_path / "tests" / "fixtures" / "snli").mkdir(parents=True)
    cfg = build_config(parse("eval", ["ckpt_path=x", "data.eval_batch_size=7", "logger=none"]), resolved)
    assert cfg.data.dir == str(tmp_path / "tests" / "fixtures" / "snli")  # the same place under this checkout
    assert cfg.data.cache_dir == str(tmp_path / "cache")
    assert cfg.paths.results_dir == str(tmp_path / "outputs" / "fixture_results")  # as the trained scale=fixture's
    assert cfg.data.eval_batch_size == 7 and cfg.task.name == "snli" and cfg.trainer.precision == "bf16-mixed"
    assert not cfg.logger and cfg.ckpt_path is None
    cfg = build_config(parse("eval", ["ckpt_path=x", "trainer.precision=32-true", "data.dir=/mine"]), resolved)
    assert cfg.trainer.precision == "32-true" and cfg.data.dir == "/mine"
    with pytest.raises(ConfigError, match="data.eval_batch_size=abc"):  # a value of the wrong type, named
        build_config(parse("eval", ["ckpt_path=x", "data.eval_batch_size=abc"]), _typed(resolved))


def _typed(cfg):
    """A config whose data.eval_batch_size is typed (as a structured config would be)."""
    from dataclasses import dataclass

    @dataclass
    class Data:
        eval_batch_size: int = 1

    out = cfg.copy()
    out.data = OmegaConf.merge(OmegaConf.structured(Data), {"eval_batch_size": 3})
    return out


def test_an_appended_key_nothing_reads_is_refused_as_in_training(make_cfg):
    trained = make_cfg("task=iwslt15_envi", "model=transformer", "scale=fixture")
    resolved = OmegaConf.create(OmegaConf.to_container(trained, resolve=True))
    with pytest.raises(ConfigError, match=r"did you mean task\.module\.decoding\.beam_size=1\?"):
        build_config(parse("eval", ["ckpt_path=x", "+task.decoding.beam_size=1"]), resolved)
    cfg = build_config(parse("eval", ["ckpt_path=x", "task.module.decoding.beam_size=1"]), resolved)
    assert cfg.task.module.decoding.beam_size == 1
    cfg = build_config(parse("eval", ["ckpt_path=x", "++task.decoding.beam_size=1"]), resolved)  # added anyway
    assert cfg.task.decoding.beam_size == 1


def test_the_record_goes_where_the_training_runs_went(make_cfg, tmp_path, monkeypatch):
    """A quickstart checkpoint (fixture data, scale named ``quickstart``) is evaluated into outputs/fixture_results,
    not into the tracked results/ (whose tables would pool it); a command's own results folder wins."""
    trained = make_cfg("experiment=quickstart", "model=decompatt")
    resolved = OmegaConf.create(OmegaConf.to_container(trained, resolve=True))
    assert resolved.scale_name == "quickstart"
    resolved.paths.root_dir = "/gone/checkout"
    resolved.paths.results_root = "/gone/checkout/outputs/fixture_results"
    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path))
    cfg = build_config(parse("eval", ["ckpt_path=x", "logger=none"]), resolved)
    assert cfg.paths.results_dir == str(tmp_path / "outputs" / "fixture_results")
    cfg = build_config(parse("eval", ["ckpt_path=x", f"paths.results_root={tmp_path}/mine"]), resolved)
    assert cfg.paths.results_dir == f"{tmp_path}/mine"
    resolved.paths.results_dir = "/gone/checkout/results/mlu_gate_ablation"  # an experiment's own folder
    cfg = build_config(parse("eval", ["ckpt_path=x"]), resolved)
    assert cfg.paths.results_dir == str(tmp_path / "results" / "mlu_gate_ablation")
    resolved.paths.results_root = resolved.paths.results_dir = "/elsewhere/results"  # not under that checkout
    cfg = build_config(parse("eval", ["ckpt_path=x"]), resolved)
    assert cfg.paths.results_dir == str(tmp_path / "results")  # this machine's default


@pytest.mark.parametrize("gpu", [False, True])
def test_float16_without_a_gpu_is_refused_in_trainings_words(make_cfg, monkeypatch, gpu):
    """coda-exp eval and training refused trainer.precision=16-mixed without a GPU in two wordings (eval's offered
    no reason tied to the record, training's no 32-true): one message, the command named in front for eval."""
    import torch

    from coda_exp.run_checks import check_trainer, quiet_lightning
    from coda_exp.trained import _float16_without_gpu, trainer_for

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    cfg = make_cfg("task=snli", "scale=fixture", "trainer.precision=16-mixed")
    with pytest.raises(ConfigError) as training:
        check_trainer(cfg)
    with quiet_lightning():
        trainer = trainer_for(cfg, None)
    inv = parse("eval", ["ckpt_path=x.ckpt", "trainer.precision=16-mixed"])
    with pytest.raises(ConfigError) as evaluation:
        _float16_without_gpu(inv, cfg, trainer)
    device = "this {} is on the CPU" if gpu else "this machine has no CUDA GPU"
    said = ("trainer.precision=16-mixed: float16 mixed precision needs a GPU, and {} (Lightning would run bf16-mixed "
            "instead, while the record would say 16-mixed): use trainer.precision=32-true or bf16-mixed"
            + (", or trainer=gpu" if gpu else ""))
    assert str(training.value) == said.format(device.format("run"))
    assert str(evaluation.value) == "coda-exp eval: " + said.format(device.format("evaluation"))
