"""coda_exp.node_keys through run_checks.check_compatible: a ``+key`` a nested node's class does not take, or a
``_target_`` that cannot be imported, is one ConfigError naming the key before any data loads (they were a
TypeError or Hydra's "Error locating target" with a traceback, after the data had loaded)."""

from __future__ import annotations

import logging

import pytest

from coda_exp.config_checks import ConfigError
from coda_exp.node_keys import locate, node_problems
from coda_exp.run_checks import check_compatible


@pytest.mark.parametrize("overrides,message", [
    (["model=decompatt_coda", "+model.attention.centre_e=true"],
     ("model.attention.centre_e is not a parameter of coda_exp.attention.CoDACrossAttention; did you mean "
     "model.attention.center_e for model.attention.centre_e?")),
    (["model=coda_transformer", "task=mlu", "+model.scoring.foo=1"],
     "model.scoring.foo is not a parameter of coda_exp.attention.CoDAScoring"),
    (["+task.module.foo=1"], "task.module.foo is not a parameter of coda_exp.tasks.RankingTask"),
    (["+data.foo=1"], "data.foo is not a parameter of coda_exp.data.pair.PairDataModule"),
    (["+optimizer.momentum=0.9"], "optimizer.momentum is not a parameter of torch.optim.Adam"),
    (["task=snli", "task.module._target_=coda_exp.tasks.PairClassificationTsk"],
     ("task.module._target_ = 'coda_exp.tasks.PairClassificationTsk': no such class or function; did you mean "
     "coda_exp.tasks.PairClassificationTask?")),
    (["model._target_=coda_exp.models.DecompAt"], "did you mean coda_exp.models.DecompAtt?"),
    (["data._target_=nowhere_at_all.Mod"],
     "data._target_ = 'nowhere_at_all.Mod': cannot be imported (no module named 'nowhere_at_all')"),
])
def test_a_node_that_cannot_be_built_is_one_message(make_cfg, caplog, overrides, message):
    with caplog.at_level(logging.ERROR), pytest.raises(ConfigError) as err:
        check_compatible(make_cfg(*overrides))
    assert message in str(err.value)
    assert not caplog.records  # Hydra's get_object logs an ERROR for a missing target; locate does not


@pytest.mark.parametrize("overrides", [[], ["model=decompatt_coda", "model.attention.center_e=true"],
                                       ["task=mlu", "model=coda_transformer"], ["task=iwslt15_envi",
                                                                               "model=transformer"]])
def test_shipped_nodes_pass(make_cfg, overrides):
    assert node_problems(make_cfg(*overrides)) == {}


def test_locate_finds_what_hydra_finds_and_a_broken_module_is_not_hidden(tmp_path, monkeypatch):
    from coda_exp.attention import CoDAScoring

    assert locate("coda_exp.attention.CoDAScoring") is CoDAScoring
    (tmp_path / "broken_probe_mod.py").write_text("import not_a_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="not_a_module_anywhere"):
        locate("broken_probe_mod.Thing")


@pytest.mark.parametrize("overrides,message", [
    (["task=snli", "task.module._target_=coda_exp.tasks.TextClassificationTask"],
     ("task.module._target_ = coda_exp.tasks.TextClassificationTask serves task.family text_classification, but the "
      "task's family is pair_classification (task.family, configs/task/snli.yaml); for pair_classification: "
      "task.module._target_=coda_exp.tasks.PairClassificationTask")),
    (["task=snli", "data._target_=coda_exp.data.text.TextClassificationDataModule"],
     ("data._target_ = coda_exp.data.text.TextClassificationDataModule serves task.family text_classification, but "
      "the task's family is pair_classification (task.family, configs/task/snli.yaml); for pair_classification: "
      "data._target_=coda_exp.data.pair.PairDataModule")),
    (["task=mlu", "model=transformer", "task.family=pair_classification", "model.families=[pair_classification]"],
     "task.module._target_ = coda_exp.tasks.Seq2SeqTask serves task.family seq2seq"),
    # the model fits neither: the task's own modules say its YAML's family is what is wrong, not the model
    (["task=mlu", "model=transformer", "task.family=pair_classification"],
     "task.module._target_ = coda_exp.tasks.Seq2SeqTask serves task.family seq2seq"),
    (["task=snli", "data.dataset=snlii"], "unknown dataset 'snlii' (data.dataset); known datasets: ["),
    (["task=snli", "data.dataset=snlii"], "did you mean data.dataset=snli?"),
    (["task=snli", "~data.dataset"],
     "data.dataset is required by coda_exp.data.pair.PairDataModule and absent: give it a value (+data.dataset=..."),
    # a word for a switch: the string "no" is true in Python, so the run lowercased while its tag said lowercase_no
    (["task=snli", "data.lowercase=no"], "data.lowercase = 'no': expected true or false"),
    (["task=snli", "+optimizer.amsgrad=maybe"], "optimizer.amsgrad = 'maybe': expected true or false"),
])
def test_a_task_or_data_module_of_another_family_or_lacking_an_argument_is_refused(make_cfg, overrides, message):
    """A task YAML naming the task module or data module of another family failed in the first training step
    (``KeyError: 'ids'``); a data node without its dataset, with a TypeError once the data was built."""
    with pytest.raises(ConfigError) as err:
        check_compatible(make_cfg(*overrides))
    assert message in str(err.value)


def test_every_shipped_task_s_modules_serve_its_family(make_cfg):
    from coda_exp.environment import config_dir

    for task in sorted(p.stem for p in (config_dir() / "task").glob("*.yaml")):
        cfg = make_cfg(f"task={task}")
        assert {k: v for k, v in node_problems(cfg).items() if k in ("task.module", "data")} == {}, task


def test_a_miscopied_task_family_is_named_before_the_models_that_fit_it(tmp_path, monkeypatch, capsys):
    """The command line's own check (before any folder) says the same: the task YAML's family, not "model=... does
    not fit" with a list of models for a family the task is not."""
    import sys

    from coda_exp import cli

    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", "task.family=text_classification", "scale=fixture"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(
        "error: task.module._target_ = coda_exp.tasks.PairClassificationTask serves task.family "), err
    assert not list(tmp_path.iterdir())
