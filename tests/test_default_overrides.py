"""Overrides that set what the configuration has without them: left out of the fingerprint, named in the record
(``coda_exp/default_overrides.py``); records without ``fingerprint_defaults`` read as before."""

from __future__ import annotations

import pytest

from coda_exp import default_overrides as defaults_module
from coda_exp.default_overrides import default_overrides
from coda_exp.experiments import record_configuration
from coda_exp.fingerprint import FINGERPRINT_RULE, GRID_FINGERPRINT, fingerprint
from tests.results.records import rec

SNLI = ["task=snli", "model=decompatt"]


def test_an_override_equal_to_the_default_is_found_after_normalisation():
    # configs/optimizer/adam.yaml: lr 0.0003 (3e-4 is the same number); adam is train.yaml's optimizer
    assert default_overrides([*SNLI, "optimizer.lr=3e-4", "optimizer=adam", "model.hidden_size=200"]) == [
        "optimizer.lr=3e-4", "optimizer=adam", "model.hidden_size=200"]
    # AdaGrad's own lr, under optimizer=adagrad (not the default option: it counts)
    assert default_overrides([*SNLI, "optimizer=adagrad", "optimizer.lr=0.01"]) == ["optimizer.lr=0.01"]
    # an interpolated default (${model.hidden_size}) is its resolved value, in this configuration
    assert default_overrides([*SNLI, "model.attention.hidden=200"]) == ["model.attention.hidden=200"]
    assert default_overrides([*SNLI, "model.attention.hidden=200", "model.hidden_size=300"]) == []


def test_a_changed_value_or_another_type_is_no_default():
    assert default_overrides([*SNLI, "optimizer.lr=0.001", "model.dropout=0.5", "+model.foo=1"]) == []
    assert default_overrides([*SNLI, "optimizer.lr=1"]) == []  # 1 is not 0.0003; an int is not a float
    # grid axes, budget and output keys are never judged (the rule drops them anyway)
    assert default_overrides([*SNLI, "seed=1", "task.epochs=3", "paths.log_dir=/tmp/x"]) == []


def test_a_composition_that_fails_keeps_todays_behaviour(monkeypatch):
    def broken():
        raise RuntimeError("no config here")

    monkeypatch.setattr(defaults_module, "_composer", broken)
    assert default_overrides([*SNLI, "optimizer.lr=0.0003"]) == []


def test_a_run_with_a_default_typed_out_has_the_fingerprint_of_the_run_without(make_cfg, caplog):
    from coda_exp.run_record import run_identity

    plain = run_identity(make_cfg(*SNLI, "scale=fixture"), [*SNLI, "scale=fixture"])
    typed = [*SNLI, "scale=fixture", "optimizer.lr=0.0003"]
    with caplog.at_level("INFO", logger="coda_exp.run_record"):
        same = run_identity(make_cfg(*typed), typed)
    assert plain["fingerprint"] == same["fingerprint"] == GRID_FINGERPRINT
    assert same["fingerprint_defaults"] == ["optimizer.lr=0.0003"] and plain["fingerprint_defaults"] == []
    assert "optimizer.lr=0.0003 is this configuration's default: it does not change the fingerprint" in caplog.text
    other = [*SNLI, "scale=fixture", "optimizer.lr=0.001"]
    changed = run_identity(make_cfg(*other), other)
    assert changed["fingerprint"] != GRID_FINGERPRINT and changed["fingerprint_overrides"] == ["optimizer.lr=0.001"]
    assert changed["fingerprint_defaults"] == []


def test_a_new_record_derived_again_leaves_its_defaults_out():
    typed = [*SNLI, "optimizer.lr=0.0003", "model.dropout=0.1"]
    new = rec(model="decompatt", overrides=typed, fingerprint=fingerprint(["model.dropout=0.1"]),
              fingerprint_overrides=["model.dropout=0.1"], fingerprint_rule=FINGERPRINT_RULE,
              fingerprint_defaults=["optimizer.lr=0.0003"])
    assert record_configuration(new) == (new["fingerprint"], ["model.dropout=0.1"])
    derived = {k: v for k, v in new.items() if k != "fingerprint_rule"}  # as a later rule would read it
    assert record_configuration(derived) == (new["fingerprint"], ["model.dropout=0.1"])


@pytest.mark.parametrize("rule", [None, FINGERPRINT_RULE])
def test_a_record_without_the_field_keeps_its_fingerprint(rule):
    """Written before ``fingerprint_defaults``: its default typed out counts, as it did."""
    old = rec(model="decompatt", overrides=[*SNLI, "optimizer.lr=0.0003"],
              fingerprint=fingerprint(["optimizer.lr=0.0003"]), fingerprint_overrides=["optimizer.lr=0.0003"],
              **({"fingerprint_rule": rule} if rule else {}))
    assert record_configuration(old) == (fingerprint(["optimizer.lr=0.0003"]), ["optimizer.lr=0.0003"])
    assert record_configuration(old)[0] != GRID_FINGERPRINT
