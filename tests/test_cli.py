"""coda_exp.cli: ``--help`` is ours (usage, the groups a user chooses, commands, examples), ``-v`` is verbose=true,
and a training run still takes Hydra's arguments as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coda_exp import cli
from tests import ROOT


@pytest.mark.parametrize("argv,expected", [
    (["task=snli", "-v"], ["task=snli", "verbose=true"]),
    (["--verbose", "-m", "seed=1,2"], ["-m", "seed=1,2", "verbose=true"]),
    (["-v", "verbose=false"], ["verbose=false"]),  # an explicit value wins
    (["task=snli", "--cfg", "job"], ["task=snli", "--cfg", "job"]),
])
def test_verbose_flag_is_the_verbose_override(argv, expected):
    assert cli.training_arguments(argv) == expected


@pytest.mark.parametrize("argv,expected", [
    # overrides on both sides of a flag used to be argparse's "unrecognized arguments"
    (["task=snli", "-m", "seed=1,2"], ["-m", "task=snli", "seed=1,2"]),
    (["task=snli", "--cfg", "job", "model=x"], ["--cfg", "job", "task=snli", "model=x"]),
    # --info's value is optional: b=2 is not one, and the value argparse gives it bare is written out, else argparse
    # takes the override after it for its value ("invalid choice: 'a=1'")
    (["a=1", "--info", "b=2"], ["--info", "all", "a=1", "b=2"]),
    (["--info", "scale=fixture"], ["--info", "all", "scale=fixture"]),
    (["scale=fixture", "-i"], ["-i", "all", "scale=fixture"]),
    (["a=1", "--info", "defaults", "b=2"], ["--info", "defaults", "a=1", "b=2"]),
    (["a=1", "--info", "defaults", "-cn", "train", "b=2"], ["--info", "defaults", "-cn", "train", "a=1", "b=2"]),
    (["a=1", "--cfg=job", "b=2"], ["--cfg=job", "a=1", "b=2"]),
    (["a=1", "--bogus", "b=2"], ["a=1", "--bogus", "b=2"]),  # not Hydra's: argparse names it
])
def test_hydras_flags_go_before_the_overrides(argv, expected):
    assert cli.flags_first(argv) == expected


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_ours(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", flag])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("coda-exp: ") and "Usage:" in out and "Examples:" in out
    assert "powered by Hydra" not in out and "_self_" not in out  # not Hydra's stock help and its config dump


def test_train_py_help_and_verbose_flag_from_a_shell():
    help_ = subprocess.run([sys.executable, str(ROOT / "train.py"), "--help"], capture_output=True, text=True,
                           check=False, timeout=120)
    assert help_.returncode == 0 and "coda-exp task=wikiqa model=decompatt scale=fixture" in help_.stdout
    job = subprocess.run([sys.executable, "-m", "coda_exp", "task=wikiqa", "-v", "--cfg", "job", "seed=5"], cwd=ROOT,
                         capture_output=True, text=True, check=False, timeout=120)
    assert job.returncode == 0 and "\nverbose: true\n" in job.stdout and "\nseed: 5\n" in f"\n{job.stdout}", job.stderr[-2000:]


@pytest.mark.parametrize("argv,messages", [
    (["task=snlii"], ["error: In 'train': Could not find 'task/snlii'", "Available options in 'task':\n\talgolisp"]),
    (["task=wikiqa", "task.max_stepz=5"], ["error: Could not override 'task.max_stepz'", "use +task.max_stepz=5"]),
    # a key the config has elsewhere, or spelled almost alike: named before Hydra's advice to add the key
    (["task=wikiqa", "task.batch_size=7"], [("error: Could not override 'task.batch_size'.\nDid you mean "
                                           "data.batch_size=7?\nTo append to your config use +task.batch_size=7")]),
    (["task=snli", "optimizer.lrr=0.1"], ["Could not override 'optimizer.lrr'.\nDid you mean optimizer.lr=0.1?"]),
    # a misspelt group or top-level key: Hydra advised +modle=decompatt, which then said "did you mean model=..."
    (["task=snli", "modle=decompatt"], [("error: modle is no key nor config group of the config, spelled like model: "
                                        "did you mean model=decompatt?")]),
    # ... and Hydra's advice taken: a new key that nothing refers to while the config has data.batch_size
    (["task=wikiqa", "+task.batch_size=7"], [("error: +task.batch_size=7 adds a new key task.batch_size that no "
                                            "config value refers to, while the config has data.batch_size: did you "
                                            "mean data.batch_size=7? (to add the key anyway: ++task.batch_size=7)")]),
    (["-m", "task=wikiqa", "+task.batch_size=7,8"], ["did you mean data.batch_size=7,8?"]),
    # a group the model does not have: its own named, not Hydra's advice to append the group (a key it refuses)
    (["task=mlu", "model=transformer", "model/attention=coda"], [("error: Could not override 'model/attention'. No "
                                                                "match in the defaults list.\nmodel=transformer has no "
                                                                "model/attention; its own group is model/scoring: did "
                                                                "you mean model/scoring=coda?\n")]),
    # null for a group used to be Hydra's ValueError("Config group override must be a string"), a traceback
    (["debug=null"], [("error: debug=null: the config group debug takes one of its options (fdr, limit, overfit), "
                       "not null; it has none by default: leave debug=null out")]),
    # ~seed used to be Hydra's traceback (hydra.run.dir interpolates ${seed}), ~task.monitor Lightning's
    (["task=snli", "~seed"], ["error: ~seed removes seed, which every run reads: give it another value instead"]),
    (["-m", "task=snli", "~task.monitor"], ["error: ~task.monitor removes task.monitor, which every run reads"]),
    (["preset=null"], ["not null; to choose none: preset=none"]),
    (["task=null"], ["error: task=null: the config group task takes one of its options (algolisp, dnli,"]),
    (["-m", "model/attention=coda,null"], ["error: model/attention=null: the config group model/attention takes"]),
    # a misspelled top-level key appended: nothing reads it, the run went on with the default seed
    (["task=snli", "+seeds=2"], [("error: +seeds=2 adds a new top-level key seeds that nothing reads, spelled like "
                                  "seed: did you mean seed=2? (to add the key anyway: ++seeds=2)")]),
    (["task=snli", "+threds=1"], ["did you mean threads=1?"]),
    # a sweep used to lose the hint a single run gives
    (["-m", "task=snli", "seed=1,2", "optimizer.lrr=1,2"], [("Could not override 'optimizer.lrr'.\nDid you mean "
                                                             "optimizer.lr=1,2?")]),
    # Hydra's grammar message names a token, not the override: the override comes first
    (["task=wikiqa", "data.batch_size=[1"], [("error: cannot read the override 'data.batch_size=[1': no viable "
                                              "alternative at input '[1'")]),
    (["task=wikiqa", "seed=1,"], [("error: cannot read the override 'seed=1,' (a value ending in a comma starts a "
                                   "sweep: give one value, or several with -m): mismatched input")]),
    (["task=wikiqa,snli"], ["error: Ambiguous value for argument 'task=wikiqa,snli'"]),
    # a sweep stops before its first job, whichever job meets the mistake
    (["-m", "task=wikiqa,snlii", "seed=1,2"], ["error: In 'train': Could not find 'task/snlii'"]),
    (["-m", "seed=1,2", "model=decompatt,nope"], ["Could not find 'model/nope'"]),
    # an unknown experiment or debug option (optional groups, once skipped in silence: the default run trained)
    (["task=mlu", "model=transformer", "experiment=tabel_6"],
     ["error: In 'train': Could not find 'experiment/tabel_6'", "Available options in 'experiment':", "\ttable_6\n"]),
    (["-m", "experiment=table6"], ["Could not find 'experiment/table6'"]),
    (["-m", "experiment=table_6,tabel_6", "scale=fixture"], ["Could not find 'experiment/tabel_6'"]),
    (["debug=fdrr"], ["error: In 'train': Could not find 'debug/fdrr'", "Available options in 'debug':\n\tfdr"]),
    # an option of another choice of the model's group: Hydra's "+model.scoring.kernel" adds a key softmax refuses
    (["task=mlu", "model=transformer", "model.scoring.kernel=bogus"],
     [("error: Could not override 'model.scoring.kernel'.\nmodel=transformer chooses model/scoring=softmax, which "
       "has no kernel; kernel is an option of model/attention=coda, model/scoring=coda: did you mean "
       "model/scoring=coda model.scoring.kernel=bogus?\n")]),
    (["task=mlu", "model=transformer", "model.attention.kernel=bogus"],
     ["model=transformer has no model/attention; kernel is", "did you mean model/scoring=coda model.scoring.kernel"]),
    # a typed key's value of another type: OmegaConf's reason and the key's type, not "Error merging override" alone
    (["hydra.job.chdir=maybe"], [("error: Error merging override hydra.job.chdir=maybe: Value 'maybe' is not a valid "
                                  "bool (type str) (hydra.job.chdir is typed in JobConf)\n")]),
])
def test_a_config_hydra_cannot_compose_is_one_message_and_exit_2(argv, messages, capsys, monkeypatch, tmp_path):
    """It used to be Hydra's report (its config search path, the HYDRA_FULL_ERROR hint) with exit status 1."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and all(m in err for m in messages), err
    assert "Config search path" not in err and "HYDRA_FULL_ERROR" not in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # no job started


@pytest.mark.parametrize("argv", [["-m", "task=wikiqa,snli", "seed=1,2", "scale=fixture"], ["task=wikiqa", "-v"],
                                  ["--cfg", "job", "task=wikiqa", "hydra.run.dir=/x"],
                                  # keys added that the code reads: selected by another key (trainer's
                                  # gradient_clip_val), a Trainer's argument, a callback's, a new name, or forced
                                  ["task=snli", "+task.gradient_clip_val=1", "+trainer.accumulate_grad_batches=2",
                                   "+callbacks.gate_stats.max_examples=3", "+data.num_test=50",
                                   "++task.batch_size=7", "++seeds=2", "+my_note=hello"],
                                  ["-m", "model=glob(decompatt*)", "task=snlii"],  # glob sweeps: Hydra's report
                                  # an experiment's sweep: with -m, or one of its runs named (docs/fast_path.md,
                                  # results/README.md), or hydra.mode=MULTIRUN
                                  ["-m", "experiment=quickstart"],
                                  # make run's sweep and the gate study: their grids are the experiments' (model=
                                  # ...), not the config's own model=decompatt, which does not fit task=mlu
                                  ["-m", "experiment=table_6", "scale=cpu", "seed=1"],
                                  ["-m", "experiment=mlu_gate_ablation", "scale=fixture"],
                                  ["experiment=table_6", "model=coda_transformer", "seed=1", "trainer=gpu_fast"],
                                  ["experiment=table_6", "scale=cpu", "model=coda_transformer",
                                   "task.cpu_scheduler.peak_lr=4e-3"],
                                  ["experiment=table_6", "scale=fixture", "hydra.mode=MULTIRUN"]])
def test_a_config_hydra_can_compose_passes_the_check(argv):
    cli.check_composition(cli.training_arguments(argv))


@pytest.mark.parametrize("argv,message", [
    (["experiment=table_6", "scale=fixture"],
     ("error: experiment=table_6 is a sweep of 6 runs: add -m (python train.py -m experiment=table_6 scale=fixture), "
      "or name one of its runs (model=transformer seed=1); without -m this run would have the config's own "
      "model=decompatt, which is none of the sweep's runs\n")),
    (["experiment=quickstart"], ("error: experiment=quickstart is a sweep of 6 runs: add -m (python train.py -m "
                                 "experiment=quickstart), or name one of its runs (model=decompatt seed=1)\n")),
    # a seed named, but the experiment's task and model (a sweep's settings) not applied without -m
    (["experiment=attconv_table_3_coda", "seed=2"], "without -m this run would have the config's own task=wikiqa"),
])
def test_an_experiment_sweep_without_m_is_one_message_before_anything_runs(argv, message, capsys, monkeypatch,
                                                                            tmp_path):
    """It used to run one of the sweep's jobs silently (quickstart), or fail on the config's defaults: "model=decompatt
    does not fit task=mlu" for Table 6, a model the user never named."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and (err == message if message.endswith("\n") else message in err), err
    assert not list(tmp_path.iterdir())  # no run folder


@pytest.mark.parametrize("multirun", [False, True])
def test_a_log_dir_where_hydra_cannot_make_the_job_folder_is_one_message(multirun, tmp_path, capsys, monkeypatch):
    """It used to be Hydra's PermissionError (or NotADirectoryError) traceback making <log_dir>/runs, exit status 1.
    A folder under a regular file stops even root; a read-only folder is simulated (tests run as root)."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    (tmp_path / "file").write_text("")
    argv = [*(["-m", "seed=1,2"] if multirun else []), "task=wikiqa", "scale=fixture",
            f"paths.log_dir={tmp_path}/file/outputs"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    assert exit_.value.code == 2 and err.startswith(f"error: {key}: the run folder {tmp_path}/file/outputs/"), err
    assert f"{tmp_path}/file is a file, not a folder; point paths.log_dir" in err and "Traceback" not in err

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.NamedTemporaryFile", refuse)
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv[:-1], f"paths.log_dir={tmp_path}/read-only"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"cannot be created: {tmp_path} is not writable (Permission denied)" in err
    assert not (tmp_path / "read-only").exists()


def test_a_model_that_cannot_run_the_task_is_said_before_hydra_makes_a_folder(tmp_path, capsys, monkeypatch):
    """task=snli model=transformer used to start Hydra (a run folder, train.log, .hydra/) before the run refused it."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", "model=transformer", "scale=fixture", f"paths.log_dir={tmp_path}/outputs"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: model=transformer does not fit task=snli"), err
    assert not (tmp_path / "outputs").exists()


def test_a_run_refused_before_it_started_leaves_no_run_folder(tmp_path, capsys, monkeypatch):
    """data.batch_size=0 is refused once Hydra has made the run folder (.hydra/, an empty train.log): that folder used
    to stay, listed by coda-exp runs --left as failed forever ("train.log names no error"), and then the empty
    outputs/runs/ it had made in a new project folder."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", "model=decompatt", "scale=fixture", "data.batch_size=0",
                  f"paths.log_dir={tmp_path}/outputs"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "data.batch_size = 0: expected an int >= 1" in err, err
    assert not list((tmp_path / "outputs").rglob("*.log")) and not list((tmp_path / "outputs").rglob(".hydra"))
    assert not (tmp_path / "outputs").exists()  # the folders it made went with it
    (tmp_path / "outputs" / "runs").mkdir(parents=True)  # folders that were there before it stay
    with pytest.raises(SystemExit):
        cli.main(["task=snli", "model=decompatt", "scale=fixture", "data.batch_size=0",
                  f"paths.log_dir={tmp_path}/outputs"])
    assert (tmp_path / "outputs" / "runs").is_dir() and not list((tmp_path / "outputs" / "runs").iterdir())


def _malformed_wikiqa(tmp_path):
    """A copy of the WikiQA fixture whose training file ends with a row of 2 fields (found as the data loads)."""
    import shutil

    from tests import FIXTURES

    data = tmp_path / "wikiqa"
    shutil.copytree(FIXTURES / "wikiqa", data)
    with open(data / "WikiQA-train.tsv", "a", encoding="utf-8") as f:
        f.write("Q9\ta broken line\n")
    lines = (data / "WikiQA-train.tsv").read_text(encoding="utf-8").count("\n")
    return data, f"error: {data}/WikiQA-train.tsv:{lines}: malformed row with 2 fields; expected 7"


def test_a_run_failing_on_its_data_before_a_step_is_its_error_alone_and_leaves_no_folder(tmp_path, capsys,
                                                                                        monkeypatch):
    """A malformed data file, found once the run's folder was chosen, printed `run folder: ...` (output not a
    terminal) before the error and kept the folder, with .hydra/, train.log and config_resolved.yaml, listed by
    coda-exp runs --left as failed, and the empty results' runs/ and predictions/ it had made: a run that trained no
    step has nothing to keep. The run folder is said as the training starts instead (e2e/test_quiet_run.py)."""
    data, error = _malformed_wikiqa(tmp_path)
    project = tmp_path / "project"
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=wikiqa", "model=decompatt", "scale=fixture", f"data.dir={data}", f"paths.root_dir={project}"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2
    lines = (captured.out + captured.err).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(error), lines
    assert not (project / "outputs").exists()  # its folder, outputs/runs/ and the results' folders


def test_a_sweep_job_failing_on_its_data_keeps_its_folder_and_log_for_the_summary(tmp_path, capsys, monkeypatch):
    """What the sweep's summary lists (the job's log) and coda-exp runs reads stays: only a single run's folder goes."""
    from coda_exp.tools import runs

    data, error = _malformed_wikiqa(tmp_path)
    project = tmp_path / "project"
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "task=wikiqa", "model=decompatt", "scale=fixture", f"data.dir={data}",
                  f"paths.root_dir={project}"])
    err = capsys.readouterr().err
    (log,) = (project / "outputs" / "multiruns").glob("*/0-wikiqa-decompatt-s1/train.log")
    assert exit_.value.code == 2 and f"log: {log}" in err, err
    assert error.removeprefix("error: ") in log.read_text(encoding="utf-8")
    (row,) = runs.states(project / "outputs")
    assert row.state == "failed" and row.folder == str(log.parent) and "malformed row" in row.note


def test_a_refused_run_leaves_none_of_the_folders_it_made_outside_its_own(tmp_path, capsys, monkeypatch):
    """data.cache_dir under a file is refused once the results' runs/ and predictions/ were made (the folders are
    checked in turn): the empty outputs/fixture_results/runs/ and predictions/ stayed in a new project folder."""
    (tmp_path / "blocker").write_text("")
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", "model=decompatt", "scale=fixture", f"paths.root_dir={tmp_path}",
                  f"paths.cache_dir={tmp_path}/blocker/cache"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{tmp_path}/blocker is a file, not a folder" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["blocker"]


def test_a_data_folder_mistake_is_one_error_line_like_any_users_mistake(tmp_path, capsys, monkeypatch):
    """A data.dir without the files printed `[time][coda_exp.pipeline][ERROR] - run failed: ...` where a config
    mistake prints `error: ...`: now one `error:` line too, exit status 2, before the run's folder is chosen (it was
    found as the data loaded, and the run listed as failed)."""
    import shutil

    from tests import FIXTURES

    shutil.copytree(FIXTURES / "snli", tmp_path / "parent" / "snli_1.0")
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=snli", "scale=fixture", "logger=none", f"data.dir={tmp_path}/parent",
                  f"paths.log_dir={tmp_path}/outputs", f"paths.cache_dir={tmp_path}/cache"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2
    assert captured.err.startswith("error: snli: data directory ") and captured.err.count("lacks") == 1, captured.err
    assert f"did you mean data.dir={tmp_path}/parent/snli_1.0?" in captured.err
    assert "run failed" not in captured.err + captured.out and "Traceback" not in captured.err
    assert not list((tmp_path / "outputs").rglob("train.log"))  # refused: no run folder


def test_the_default_model_that_cannot_run_the_task_is_named_so_with_the_models_that_can(tmp_path, capsys,
                                                                                        monkeypatch):
    """task=mlu alone used to say "model=decompatt does not fit", a model the user never typed."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["task=mlu", "scale=fixture", f"paths.log_dir={tmp_path}/outputs"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: model=decompatt (the default model: no model= was given) "
                                                    "does not fit task=mlu: the task is seq2seq"), err
    assert "; the models that fit it: model=coda_transformer, " in err and ", model=transformer\n" in err


@pytest.mark.parametrize("argv,message", [
    (["-m", "experiment=quickstart", "scale=fixture", "--cfg", "job"], "drop -m"),
    (["--info", "-m", "task=snli"], "-m and --info given together"),
])
def test_hydra_commands_given_together_are_one_message(argv, message, capsys, monkeypatch):
    """It used to be Hydra's ValueError("Only one of --run, --multirun, --cfg ..."), a traceback."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv", [["--info", "scale=fixture"], ["scale=fixture", "--info"], ["-i", "scale=fixture"]])
def test_info_with_overrides_shows_the_composed_config(argv, capsys, monkeypatch):
    """``coda-exp --info scale=fixture`` (and ``scale=fixture --info``, which Hydra's own scripts take) used to be
    argparse's "invalid choice: 'scale=fixture'": the flags moved before the overrides and the bare --info took the
    first override for its value."""
    import logging

    monkeypatch.setattr(sys, "argv", ["coda-exp"])
    handlers, level = list(logging.root.handlers), logging.root.level
    try:
        cli.main(argv)
    finally:  # Hydra's logging config writes to this test's captured stderr: not to later tests'
        logging.root.handlers[:] = handlers
        logging.root.setLevel(level)
    captured = capsys.readouterr()
    assert "invalid choice" not in captured.err and "Defaults List" in captured.out, captured.err[-2000:]
    assert "\nscale_name: fixture\n" in captured.out


@pytest.mark.parametrize("argv,lines", [
    (["task=snli", "model=decompatt", "optimizer.lr=1e-3,abc"],
     ["  job optimizer.lr=abc: optimizer.lr = 'abc': expected a number > 0"]),
    (["task=snli", "model=decompatt", "data.batch_size=8,-2", "seed=1,2,3"],
     ["the sweep of 6 jobs would fail", "  job data.batch_size=-2 seed=1: data.batch_size = -2: expected an int >= 1"]),
    # (mlu, decompatt) is not one of the jobs composed (each swept value once): its fit is still checked
    (["task=snli,mlu", "model=transformer,decompatt"],
     ["  job task=snli model=transformer: model=transformer does not fit task=snli",
      "  job task=mlu model=decompatt: model=decompatt does not fit task=mlu"]),
    (["task=snli", "optimizer.lr=-1", "seed=1,2"], ["  every job: optimizer.lr = -1: expected a number > 0"]),
    # an experiment's own grid (model: transformer,coda_transformer; seed: 1,2,3) is the sweep's: each job checked
    (["experiment=table_6", "data.batch_size=-2"],
     ["the sweep of 6 jobs would fail", "  every job: data.batch_size = -2: expected an int >= 1"]),
    # the seed error alone: the first job used to be composed without the experiment's model (a false model line)
    (["experiment=table_6", "seed=abc"], ["  every job: seed = 'abc': expected an int in [0, 4294967295]"]),
    # a CoDA option failed only at its job, as a crash (exit 1), after the good jobs had trained
    (["task=snli", "model=decompatt_coda", "model.attention.e_fn=tanh,bogus"],
     [("  job model.attention.e_fn=bogus: model.attention.e_fn = 'bogus': CoDA option e_fn must be one of "
      "['sigmoid', 'tanh'], got 'bogus'")]),
])
def test_a_sweep_whose_jobs_would_fail_is_refused_before_its_first_job(argv, lines, tmp_path, capsys, monkeypatch):
    """A bad swept value used to fail only when its job came up, after the good jobs had trained."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "scale=fixture", *argv, f"paths.log_dir={tmp_path}/outputs"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: the sweep of ") and err.count("error:") == 1, err
    assert "no job has run" in err and all(line in err.splitlines() or line in err for line in lines), err
    assert len(err.splitlines()) == 1 + len([line for line in lines if line.startswith("  ")])  # the good jobs: none
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("argv,line", [
    (["task=snli", "model=decompatt", "seed=1,1"], "seed=1,1 repeats 1"),
    (["experiment=table_6", "seed=2,3,2"], "seed=2,3,2 repeats 2"),  # the experiment's model axis swept too
])
def test_a_sweep_that_repeats_a_value_is_refused(argv, line, tmp_path, capsys, monkeypatch):
    """seed=1,1 trained the same configuration twice without a word, the second record superseding the first."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "scale=fixture", *argv, f"paths.log_dir={tmp_path}/outputs"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: the sweep repeats a value: ") and line in err, err
    assert not (tmp_path / "outputs").exists()
