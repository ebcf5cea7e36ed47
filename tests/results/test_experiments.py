"""An experiment's own settings count in the configuration fingerprint, and a table's grid is what its experiments
set (coda_exp/experiments.py)."""

from __future__ import annotations

import pytest

from coda_exp.experiments import (
    earlier_defaults,
    experiment_settings,
    grid_fingerprint,
    record_configuration,
    run_configuration,
    table_grid,
)
from coda_exp.fingerprint import GRID_FINGERPRINT, digest
from coda_exp.table_render import render_markdown
from coda_exp.tables import UnknownFingerprintWarning, build_table
from tests.results.records import cell, rec

SNLI_GRID = ["data.batch_size=50", "data.max_len_a=70", "data.max_len_b=70", "optimizer=adagrad"]


def test_an_experiments_settings_are_read_as_overrides():
    assert experiment_settings("attconv_table_7") == ["optimizer=adagrad", "data.batch_size=50", "data.max_len_a=70",
                                                      "data.max_len_b=70"]
    assert experiment_settings("table_6") == ["task=mlu"]  # a grid axis: no configuration of its own
    assert experiment_settings("quickstart") == ["task=wikiqa", "scale=fixture", "scale_name=quickstart",
                                                 "task.epochs=15"]
    t8 = experiment_settings("table_8")  # its sweep parameter (centering) is not a setting
    assert "model=decompatt_coda" in t8 and not any(s.startswith("centering=") for s in t8)
    assert experiment_settings(None) == [] and experiment_settings("no_such_experiment") is None


def test_an_empty_mapping_is_a_setting_of_its_own_but_no_config_leaf(tmp_path):
    """experiments.py and config_keys.py share one flattening (config_keys.leaves), which differs on an empty
    mapping only: an experiment's ``callbacks: {}`` is the setting ``callbacks={}`` (it empties the group), while a
    config's leaves (the keys a mistyped override may have meant, the keys two configurations differ in) have none."""
    from coda_exp.config_keys import leaves

    node = {"a": {}, "b": {"c": {}, "d": 1}, "e": [1, 2]}
    assert leaves(node) == {"b.d": 1, "e": [1, 2]}
    assert leaves(node, keep_empty=True) == {"a": {}, "b.c": {}, "b.d": 1, "e": [1, 2]}
    assert leaves({}) == leaves({}, keep_empty=True) == {}
    (tmp_path / "x.yaml").write_text("callbacks: {}\ndata:\n  batch_size: 50\n  extra: {}\n")
    assert experiment_settings("x", tmp_path) == ["callbacks={}", "data.batch_size=50", "data.extra={}"]


def test_a_table_whose_experiments_set_nothing_keeps_the_plain_grid(shipped):
    own = {t: table_grid(t) for t in shipped if grid_fingerprint(t) != GRID_FINGERPRINT}
    assert own == {"attconv_table_5": [g.replace("70", "50") for g in SNLI_GRID], "attconv_table_7": SNLI_GRID}


def test_a_tables_experiments_must_agree(tmp_path):
    (tmp_path / "t_x.yaml").write_text("data:\n  batch_size: 50\nhydra: {sweeper: {params: {seed: '1,2'}}}\n")
    (tmp_path / "t_x_coda.yaml").write_text("data:\n  batch_size: 32\nhydra: {sweeper: {params: {seed: '1,2'}}}\n")
    with pytest.raises(ValueError, match="t_x: its experiments set different configurations .*t_x: "
                                         "data.batch_size=50; t_x_coda: data.batch_size=32"):
        table_grid("t_x", tmp_path)
    (tmp_path / "t_x_coda.yaml").write_text("data:\n  batch_size: 50\n")
    assert table_grid("t_x", tmp_path) == ["data.batch_size=50"]


def test_a_command_line_setting_replaces_the_experiments():
    run = run_configuration(["experiment=attconv_table_7", "optimizer=adam", "data.batch_size=16"], None, None)
    assert run["experiment"] == "attconv_table_7"
    assert run["fingerprint_overrides"] == ["data.batch_size=16", "data.max_len_a=70", "data.max_len_b=70",
                                            "optimizer=adam"]


def _record(make_cfg, overrides: list[str], seed: int, acc: float) -> dict:
    """A record as the pipeline writes it for ``overrides`` and ``seed``."""
    from coda_exp.run_record import attention_options, run_identity

    overrides = [*overrides, f"seed={seed}", "scale=fixture"]
    cfg = make_cfg(*overrides)
    identity = run_identity(cfg, overrides)
    return rec(task=str(cfg.task.name), model=str(cfg.model.name), seed=seed, scale="fixture",
               metrics={"test/acc": acc}, attention=attention_options(cfg),
               **{k: v for k, v in identity.items() if k not in ("run_id", "task", "model", "seed", "scale")})


def test_a_plain_run_pools_with_the_experiments_only_with_its_settings(make_cfg, shipped):
    """Issue: a plain task=snli model=attconv_light run (Adam, batch 16) became a seed of AttConv Table 7."""
    ours = _record(make_cfg, ["experiment=attconv_table_7", "task=snli", "model=attconv_light"], 1, 0.9)
    assert ours["experiment_overrides"][0] == "optimizer=adagrad" and ours["fingerprint_overrides"] == SNLI_GRID
    plain = _record(make_cfg, ["task=snli", "model=attconv_light"], 2, 0.5)
    assert plain["fingerprint"] == GRID_FINGERPRINT != ours["fingerprint"] == grid_fingerprint("attconv_table_7")
    same = _record(make_cfg, ["task=snli", "model=attconv_light", "optimizer=adagrad", "data.batch_size=50",
                              "data.max_len_a=70", "data.max_len_b=70"], 3, 0.8)
    assert same["fingerprint"] == ours["fingerprint"]  # the same settings from the command line: the same cell
    table = build_table(shipped["attconv_table_7"], [ours, plain, same])
    c = cell(table, "AttConv light", "acc")
    assert c.seeds == [1, 3] and [o["run_id"] for o in c.off_grid] == [plain["run_id"]]
    markdown = render_markdown(table)
    assert f"seed 2 (fixture) without the grid's {' '.join(SNLI_GRID)} ({plain['run_id']})" in markdown
    assert f"Configuration: the settings of `configs/experiment/attconv_table_7*.yaml`, `{' '.join(SNLI_GRID)}`" \
        in markdown


def test_an_older_record_reads_its_experiment_today(shipped):
    """A record of rule 1 kept no experiment settings: today's file of its experiment= stands in for them. Where
    rule 2 changed what its task computes by default (AttConv on SNLI now truncates at 70 tokens), the record says
    so and stays out of today's cells; elsewhere (MLU) it pools."""
    older = rec(task="snli", model="attconv_light", seed=1, overrides=["experiment=attconv_table_7", "seed=1"],
                fingerprint=GRID_FINGERPRINT, fingerprint_overrides=[], attention={"name": "none"})
    earlier = sorted([*SNLI_GRID, "defaults_before_rule_2=untruncated"])
    assert record_configuration(older) == (digest(earlier), earlier)
    with pytest.warns(UnknownFingerprintWarning, match="earlier fingerprint rule"):
        table = build_table(shipped["attconv_table_7"], [older])
    assert cell(table, "AttConv light", "acc").seeds == []
    assert "defaults_before_rule_2=untruncated" in render_markdown(table)
    mlu = rec(task="mlu", model="transformer", seed=1, overrides=["experiment=table_6", "seed=1"],
              fingerprint=GRID_FINGERPRINT, fingerprint_overrides=[], attention={"name": "softmax"})
    assert record_configuration(mlu) == (GRID_FINGERPRINT, [])


def test_earlier_defaults_name_what_rule_2_changed():
    assert earlier_defaults("iwslt15_envi", "coda_transformer", "tanh", None) == [
        "defaults_before_rule_2=word-vocabulary+doubled-gate"]
    assert earlier_defaults("quasart", "decaprop") == ["defaults_before_rule_2=span-15"]
    assert earlier_defaults("iwslt15_envi", "coda_transformer", "tanh", 2.0) == [
        "defaults_before_rule_2=word-vocabulary"]  # an explicit gate_scale meant the same then
    assert earlier_defaults("wikiqa", "decompatt_coda", "sigmoid", 2.0) == []
    assert earlier_defaults("snli", "decompatt") == [] and earlier_defaults("mlu", "coda_transformer") == []



def test_an_experiment_of_ones_own_in_a_searchpath_folder_counts_in_the_fingerprint(tmp_path):
    """docs/layout.md's own experiment (hydra.searchpath=[file:///...]) was "no configs/experiment/<name>.yaml here":
    its lr 0.01 left out of the fingerprint, the run pooled into Table 2's D-ATT WikiQA cell (Adam lr 3e-4)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from coda_exp import resolvers  # noqa: F401
    from coda_exp.experiments import run_configuration
    from coda_exp.run_record import run_identity
    from tests import ROOT

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "my_lr.yaml").write_text("# @package _global_\ndefaults:\n  - override /task: wikiqa\n"
                                                        "optimizer:\n  lr: 0.01\n")
    overrides = ["experiment=my_lr", f"hydra.searchpath=[file://{tmp_path}]", "model=decompatt", "scale=fixture"]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "configs")):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # (tests/conftest.py clears it after each test)
    with open_dict(cfg):
        del cfg["hydra"]
    identity = run_identity(cfg, overrides)
    assert identity["experiment_overrides"] == ["task=wikiqa", "optimizer.lr=0.01"]
    assert identity["fingerprint"] == run_configuration(["optimizer.lr=0.01"], None, None, [])["fingerprint"]
