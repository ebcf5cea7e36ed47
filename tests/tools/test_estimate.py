"""coda-exp estimate (coda_exp/tools/estimate.py): the extrapolation from a few timed steps, and its refusals of a bad
config, a sweep, in one message before any data loads; its options before or after the overrides."""

import pytest


@pytest.mark.parametrize("overrides,steps", [
    (["task=mlu", "model=transformer", "scale=fixture", "task.max_steps=40", "task.val_check_interval=10"], 40),
    (["task=wikiqa", "model=decompatt_coda", "scale=fixture", "task.epochs=3"], None),
])
def test_estimate_runtime_extrapolates_the_config(overrides, steps, capsys):
    from coda_exp.tools import estimate as est

    out = est.main([*overrides, "--steps", "2", "--warmup", "1", "--eval-batches", "1"])
    assert out["per_step_s"] > 0 and out["per_eval_batch_s"] > 0
    if steps is not None:  # step-based: max_steps and one validation per val_check_interval
        assert out["steps"] == steps and out["validations"] == 4
    else:  # epoch-based: epochs x batches per epoch, one validation per epoch
        assert out["validations"] == 3 and out["steps"] % 3 == 0 and out["steps"] > 0
    assert out["train_s"] == pytest.approx(out["steps"] * out["per_step_s"])
    assert out["total_s"] == pytest.approx(out["train_s"] + out["eval_s"])
    assert "total:" in capsys.readouterr().out


@pytest.mark.parametrize("overrides,message", [
    (["task=snlii"], "Could not find 'task/snlii'"),
    (["task=wikiqa", "task.max_stepz=5"], "use +task.max_stepz=5"),
    (["task=wikiqa", "optimizer.lr=-1"], "optimizer.lr = -1: expected a number > 0"),
    (["task=wikiqa", "trainer.precision=bf17-mixed"], "Precision 'bf17-mixed' is invalid"),
])
def test_estimate_refuses_a_bad_config_in_one_message_before_any_data(overrides, message, capsys, monkeypatch):
    """Hydra's report with exit 1 (composition) or a traceback after the data loaded (trainer), before."""
    from coda_exp import commands

    monkeypatch.setattr("coda_exp.pipeline.build_data", lambda cfg: pytest.fail("data loaded before the check"))
    assert commands.run_command("estimate", ["scale=fixture", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Config search path" not in err, err


@pytest.mark.parametrize("argv,message", [
    (["seed=1,2"], ("error: seed=1,2: estimate times one configuration, so each key takes one value; pick one "
                    "(e.g. seed=1) and estimate each configuration on its own\n")),
    (["task=wikiqa", "model=decompatt,decompatt_coda"], "model=decompatt,decompatt_coda: estimate times one"),
    (["-m", "task=wikiqa"], "error: -m: estimate times one configuration and takes no sweep; give each key one value\n"),
])
def test_estimate_refuses_a_sweep_naming_it_not_hydras_multirun_advice(argv, message, capsys, monkeypatch):
    """It used to print Hydra's "Ambiguous value ... add --multirun", a flag estimate does not take."""
    from coda_exp import commands

    monkeypatch.setattr("coda_exp.offline.build_offline", lambda *a, **k: pytest.fail("composed a sweep"))
    assert commands.run_command("estimate", argv) == 2
    err = capsys.readouterr().err
    assert (err == message if message.endswith("\n") else message in err) and "multirun" not in err, err


@pytest.mark.parametrize("argv,message", [
    (["experiment=table_3", "scale=fixture"], ("error: experiment=table_3 is a sweep of 24 runs: estimate times one "
                                               "configuration; name one of its runs (task=snli model=decompatt "
                                               "seed=1); as given, the run would have the config's own task=wikiqa, "
                                               "which is none of the sweep's runs\n")),
    (["experiment=table_6", "scale=fixture"], ("error: experiment=table_6 is a sweep of 6 runs: estimate times one "
                                               "configuration; name one of its runs (model=transformer seed=1); as "
                                               "given, the run would have the config's own model=decompatt, which is "
                                               "none of the sweep's runs\n")),
])
def test_an_experiment_that_is_a_sweep_is_refused_as_train_py_refuses_it(argv, message, capsys, monkeypatch):
    """experiment=table_3 used to estimate wikiqa x decompatt, a run not in Table 3; experiment=table_6 failed on
    model=decompatt, a model the user never named."""
    from coda_exp import commands

    monkeypatch.setattr("coda_exp.offline.build_offline", lambda *a, **k: pytest.fail("estimated a run of no job"))
    assert commands.run_command("estimate", argv) == 2
    err = capsys.readouterr().err
    assert err == message and "-m" not in err, err


def test_one_run_of_an_experiment_sweep_is_estimated(monkeypatch):
    from coda_exp.tools import estimate as est

    seen = []
    monkeypatch.setattr("coda_exp.offline.build_offline", lambda overrides, **k: seen.append(overrides) or 1 / 0)
    for argv in (["experiment=table_3", "task=mnli", "model=decompatt_coda"], ["experiment=table_6", "model=transformer"]):
        with pytest.raises(ZeroDivisionError):  # passed the check: the build starts
            est.main([*argv, "scale=fixture"])
    assert len(seen) == 2


def test_estimate_takes_its_options_before_or_after_the_overrides(monkeypatch):
    from coda_exp.tools import estimate as est

    seen = []
    monkeypatch.setattr("coda_exp.offline.build_offline", lambda overrides, **k: seen.append(overrides) or 1 / 0)
    for argv in (["--steps", "3", "task=snli", "scale=fixture"], ["task=snli", "--steps", "3", "scale=fixture"]):
        with pytest.raises(ZeroDivisionError):  # stops where the build would start
            est.main(argv)
    assert seen == [["task=snli", "scale=fixture"]] * 2


def test_help_reads_the_whole_description_once(capsys):
    from coda_exp.tools import estimate as est

    with pytest.raises(SystemExit) as exit_:
        est.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.count("How long would this run take here?") == 1
    assert "Nothing is written to results/." in out and out.count("Any training override works") == 1
    assert "``" not in out and "coda-exp estimate: how" not in out
