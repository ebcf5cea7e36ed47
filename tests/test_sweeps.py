"""coda_exp.sweeps: an experiment that is a sweep, chosen without -m (the entry point's refusal: tests/test_cli.py;
estimate's: tests/tools/test_estimate.py)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from coda_exp.sweeps import sweep_problem
from tests import ROOT


@pytest.mark.parametrize("overrides,expected", [
    (["experiment=table_3"], ("table_3", 24, ["task=snli", "model=decompatt", "seed=1"], ["task=wikiqa"])),
    (["experiment=table_6"], ("table_6", 6, ["model=transformer", "seed=1"], ["model=decompatt"])),
    (["experiment=table_6", "model=transformer", "seed=2"], None),  # one of its runs, named
    (["experiment=table_3", "task=mnli", "model=decompatt_coda"], None),  # seed 1, the grid's first
    (["task=wikiqa"], None),  # no sweep
])
def test_which_run_of_the_sweep_was_meant(overrides, expected):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
        assert sweep_problem(cfg, OverridesParser.create().parse_overrides(overrides)) == expected
