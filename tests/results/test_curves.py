"""coda_exp.curves: run groups (model / CoDA variant), validation curves against steps, loading several folders."""

from __future__ import annotations

import json

import pytest

from coda_exp.curves import (
    Curve,
    attention_variant,
    first_step_reaching,
    group_label,
    load_run_records,
    val_check_interval,
    validation_curve,
)
from coda_exp.results import RecordWarning
from tests.results.records import mlu_rec, rec


def test_a_variant_is_named_by_its_non_default_options():
    assert group_label(mlu_rec("transformer")) == "transformer"
    assert group_label(mlu_rec()) == "coda_transformer"  # center_over=row is CoDAScoring's own default
    assert group_label(mlu_rec(options={"center_n": True})) == "coda_transformer[center_n=true]"
    assert group_label(mlu_rec(options={"n_fn": "tanh", "center_e": True, "beta": 0.5})) == \
        "coda_transformer[beta=0.5, center_e=true, n_fn=tanh]"
    assert group_label(mlu_rec(options={"kernel": "torch"})) == "coda_transformer"  # every kernel computes the same M
    assert group_label(mlu_rec(options={"center_n": True}), by="model") == "coda_transformer"
    with pytest.raises(ValueError, match="group by must be one of"):
        group_label(mlu_rec(), by="seed")


def test_defaults_follow_the_module_that_ran():
    # a pairwise model's CoDACrossAttention defaults to gate_scale 2.0 (its OPTION_DEFAULTS), without a _target_
    pairwise = rec(hparams={"attention": {"name": "coda", "gate_scale": 2.0, "center_over": "slice"}})
    assert attention_variant(pairwise) == {}
    # an old record with only its `attention` (no hparams): compared with CoDAOptions()
    assert attention_variant(rec(attention={"name": "coda", "center_over": "row"})) == {"center_over": "row"}
    # an option today's code does not know: counts when set, not when null
    assert attention_variant(mlu_rec(options={"l1_backend": None})) == {}
    assert group_label(mlu_rec(options={"l1_backend": "numba"})) == "coda_transformer[l1_backend=numba]"


def test_a_run_of_another_configuration_is_its_own_group():
    off = mlu_rec("transformer", fingerprint="0123456789ab", fingerprint_overrides=["optimizer.lr=0.001"])
    assert group_label(off) == "transformer {optimizer.lr=0.001}"
    older = mlu_rec("transformer", overrides=["model=transformer", "seed=2", "data.batch_size=32"])
    del older["fingerprint"], older["fingerprint_overrides"]  # written before fingerprints: from its overrides
    assert group_label(older) == "transformer {data.batch_size=32}"
    assert group_label(off, by="model") == "transformer"
    # an attention option is another configuration, named once: in the brackets (an older record, rule 1, too)
    beta = mlu_rec(options={"beta": 0.0}, overrides=["experiment=table_6", "model.scoring.beta=0.0"],
                   fingerprint_rule=None)
    assert group_label(beta) == "coda_transformer[beta=0.0]"
    assert group_label({**beta, "overrides": [*beta["overrides"], "model.dropout=0"]}) == \
        "coda_transformer[beta=0.0] {model.dropout=0}"


def test_curve_steps_recorded_from_the_interval_or_the_index():
    assert validation_curve(mlu_rec()) == Curve([0.0, 0.2, 0.4], [10, 20, 30], "steps")
    old = mlu_rec(steps=None, overrides=["task=mlu", "+task.val_check_interval=500"])
    assert validation_curve(old) == Curve([0.0, 0.2, 0.4], [500, 1000, 1500], "interval")
    resumed = mlu_rec(steps=[None, None, 1400], overrides=["task.val_check_interval=500"])  # resumed, old checkpoint
    assert validation_curve(resumed).steps == [500, 1000, 1400]
    unknown = mlu_rec(steps=[None, 20, 30])
    assert validation_curve(unknown) == Curve([0.0, 0.2, 0.4], [1, 2, 3], "index")
    assert not validation_curve(unknown).has_steps
    from_hparams = mlu_rec(steps=None)
    from_hparams["hparams"]["val_check_interval"] = 7
    assert validation_curve(from_hparams).steps == [7, 14, 21]
    assert val_check_interval(mlu_rec(overrides=["task.val_check_interval=0.5"])) is None  # a fraction of an epoch
    assert val_check_interval(mlu_rec(overrides=["task.val_check_interval=²"])) is None  # not an ASCII digit


@pytest.mark.parametrize("key,value,message", [
    ("val_curve_steps", [10, 20], "key 'val_curve_steps': expected a list of 3 ints"),
    ("val_curve_steps", [10, "20", 30], "key 'val_curve_steps'"),
    ("val_curve", [0.1, float("nan")], "key 'val_curve': expected a list of finite numbers"),
])
def test_a_malformed_curve_names_the_record_and_key(key, value, message):
    record = mlu_rec()
    record[key] = value
    with pytest.raises(ValueError, match=message) as err:
        validation_curve(record)
    assert f"run record {record['run_id']}.json" in str(err.value)


def test_first_step_reaching_a_threshold():
    curve = Curve([0.05, 0.12, 0.09, 0.31], [100, 200, 300, 400], "steps")
    assert first_step_reaching(curve, 0.1) == 200 and first_step_reaching(curve, 0.3) == 400
    assert first_step_reaching(curve, 0.5) is None


def test_records_of_several_folders_each_run_once(tmp_path):
    a, b = mlu_rec(seed=1), mlu_rec(seed=2)
    (tmp_path / "results" / "runs").mkdir(parents=True)
    (tmp_path / "flat").mkdir()
    for folder, records in ((tmp_path / "results" / "runs", [a]), (tmp_path / "flat", [a, b])):
        for r in records:
            (folder / f"{r['run_id']}.json").write_text(json.dumps(r))
    with pytest.warns(RecordWarning, match="in several folders"):
        loaded = load_run_records([tmp_path / "results", tmp_path / "flat"])  # results/ means results/runs/
    assert sorted(r["seed"] for r in loaded) == [1, 2]
    with pytest.raises(FileNotFoundError, match="no such folder of run records"):
        load_run_records([tmp_path / "missing"])


def test_evaluation_records_are_no_runs_of_the_curves(tmp_path):
    """A record of coda-exp eval has no training curve and is not a second run of its seed: left out."""
    from coda_exp import results
    from coda_exp.curves import load_run_records
    from tests.results.records import mlu_rec

    trained = mlu_rec(seed=1)
    evaluation = mlu_rec(seed=1, mode="eval", trained_run_id=trained["run_id"], val_curve=[])
    for record in (trained, evaluation):
        results.write_record(record, tmp_path / "runs")
    assert [r["run_id"] for r in load_run_records([tmp_path])] == [trained["run_id"]]


def test_a_default_decompatt_coda_run_is_named_by_its_model_alone():
    """CoDACrossAttention's own constructor defaults (hidden=200, dropout=0.2, projection, share_projections) are
    defaults too: only an option set otherwise is named."""
    attention = {"name": "coda", "_target_": "coda_exp.attention.CoDACrossAttention", "_partial_": True,
                 "hidden": 200, "projection": "linear", "share_projections": True, "dropout": 0.2, "scale": True,
                 "alpha": 1.0, "beta": 1.0, "e_fn": "tanh", "n_fn": "sigmoid", "center_e": False, "center_n": False,
                 "gate_scale": 2.0, "center_over": "slice", "query_scale": False, "kernel": "auto"}
    assert group_label(rec(task="wikiqa", hparams={"attention": attention})) == "decompatt_coda"
    wider = {**attention, "hidden": 300, "projection": "mlp"}
    assert group_label(rec(task="wikiqa", hparams={"attention": wider})) == "decompatt_coda[hidden=300, projection=mlp]"
