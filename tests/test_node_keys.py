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
