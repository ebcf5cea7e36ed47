"""W&B: the run id kept in the run folder and resumed, the group by experiment and configuration fingerprint, the
job type, and the run record's summary and table cells at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda_exp import loggers
from coda_exp.fingerprint import FINGERPRINT_RULE, GRID_FINGERPRINT, fingerprint
from coda_exp.pipeline import run
from coda_exp.run_record import run_identity
from tests.results.records import rec


def _wandb(cfg, job_type="train"):
    (lg,) = loggers.build_loggers(cfg, run_identity(cfg, []), job_type=job_type)
    return lg._wandb_init  # what wandb.init receives (the W&B run starts lazily: nothing starts here)


def test_a_new_run_draws_an_id_and_keeps_it_in_its_folder(make_cfg, tmp_path):
    init = _wandb(make_cfg("task=snli", "logger=wandb"))
    kept = (tmp_path / "run" / loggers.WANDB_ID_FILE).read_text().strip()
    assert init["id"] == kept and len(kept) == 8 and init["resume"] == "allow"
    assert init["job_type"] == "train" and init["group"] == f"snli-decompatt-{GRID_FINGERPRINT}-paper"
    again = _wandb(make_cfg("task=snli", "logger=wandb"))  # a fresh run (no ckpt_path) is a new W&B run
    assert again["id"] != kept


def test_a_resumed_run_resumes_its_wandb_run(make_cfg, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / loggers.WANDB_ID_FILE).write_text("keep1234\n")
    init = _wandb(make_cfg("task=snli", "logger=wandb", f"ckpt_path={folder}/checkpoints/last.ckpt"))
    assert init["id"] == "keep1234" and init["resume"] == "allow"


def test_the_group_separates_configurations_and_an_eval_joins_its_runs_group(make_cfg):
    swept = make_cfg("task=snli", "logger=wandb", "optimizer.lr=0.001")
    (lg,) = loggers.build_loggers(swept, run_identity(swept, ["task=snli", "optimizer.lr=0.001"]))
    assert lg._wandb_init["group"] == f"snli-decompatt-{fingerprint(['optimizer.lr=0.001'])}-paper" != \
        f"snli-decompatt-{GRID_FINGERPRINT}-paper"
    identity = {"experiment": "table_2", "task": "snli", "model": "decompatt", "fingerprint": "abc", "scale": "cpu"}
    assert loggers.wandb_group(identity) == "table_2-abc-cpu"
    assert _wandb(make_cfg("task=snli", "logger=wandb"), job_type="eval")["job_type"] == "eval"


def test_the_group_and_tags_keep_scales_and_budgets_apart(make_cfg):
    """The fingerprint leaves the scale and the budget out (tables keep them apart by the record's scale label): a
    smoke run, a run of another budget and a paper run of one configuration shared a W&B group, and only the
    scale's name was a tag."""
    def init(*overrides):
        cfg = make_cfg("task=snli", "logger=wandb", *overrides)
        (lg,) = loggers.build_loggers(cfg, run_identity(cfg, ["task=snli", *overrides]))
        return lg._wandb_init

    paper, fixture, budget = init(), init("scale=fixture"), init("scale=fixture", "task.epochs=3")
    assert paper["group"] == f"snli-decompatt-{GRID_FINGERPRINT}-paper"
    assert fixture["group"] == f"snli-decompatt-{GRID_FINGERPRINT}-fixture"
    assert budget["group"] == f"snli-decompatt-{GRID_FINGERPRINT}-fixture (task.epochs=3)"
    assert fixture["tags"] == ["snli", "decompatt", "fixture"]
    assert budget["tags"] == ["snli", "decompatt", "fixture", "fixture (task.epochs=3)"]
    long = {"task": "snli", "model": "decompatt", "fingerprint": "abc", "scale": "paper (" + "x" * 200 + ")"}
    other = {**long, "scale": long["scale"] + " "}
    cut = [loggers.wandb_group(long), loggers.wandb_group(other)]  # W&B takes 128 characters at most
    assert [len(g) for g in cut] == [loggers.GROUP_CHARS] * 2 and cut[0] != cut[1]


def test_run_names_carry_the_configuration_tag_of_the_run_folders(make_cfg):
    """Both runs of an lr sweep were named snli-decompatt-s1, where their folders' tags tell them apart."""
    from coda_exp.run_tag import config_tag

    def name(*overrides):
        cfg = make_cfg("task=snli", "logger=wandb", *overrides)
        (lg,) = loggers.build_loggers(cfg, run_identity(cfg, ["task=snli", "logger=wandb", *overrides]))
        return lg._wandb_init["name"]

    swept = [name(f"optimizer.lr={lr}") for lr in ("1e-3", "3e-4")]
    assert swept[0] == f"snli-decompatt-s1-{config_tag(['optimizer.lr=1e-3'])}" and swept[0].startswith(
        "snli-decompatt-s1-lr_1e-3@") and swept[1].startswith("snli-decompatt-s1-lr_3e-4@")
    # a plain run has no tag, as its folder; nor have the seed, scale and budget (the group has those)
    assert name() == name("seed=1", "scale=fixture", "task.epochs=3") == "snli-decompatt-s1"
    assert name("logger.wandb.name=mine") == "mine"


def test_a_group_or_job_type_set_by_the_user_is_kept(make_cfg):
    init = _wandb(make_cfg("task=snli", "logger=wandb", "logger.wandb.group=mine", "logger.wandb.job_type=probe"))
    assert init["group"] == "mine" and init["job_type"] == "probe"


def test_record_summary_has_the_final_metrics_and_the_table_cells():
    record = rec(task="snli", model="decompatt", seed=1, metrics={"test/acc": 0.8, "val/acc": 0.9},
                 attention={"name": "softmax"}, fingerprint=GRID_FINGERPRINT, fingerprint_overrides=[],
                 fingerprint_rule=FINGERPRINT_RULE, status="finished")
    summary = loggers.record_summary(record)
    assert summary["test/acc"] == 0.8 and summary["record/run_id"] == record["run_id"]
    assert summary["record/fingerprint"] == GRID_FINGERPRINT
    cells = {k: v for k, v in summary.items() if k.startswith("table/")}
    assert cells and all(v == pytest.approx(80.0) for k, v in cells.items() if "/SNLI" in k)
    assert "table/table_3/D-ATT/SNLI" in cells  # CoDA Table 3's D-ATT row, SNLI column
    off = loggers.record_summary({**record, "fingerprint": fingerprint(["optimizer.lr=0.1"]),
                                  "fingerprint_overrides": ["optimizer.lr=0.1"]})
    assert not [k for k in off if k.startswith("table/")]  # another configuration fills no cell


def test_finish_writes_the_summary_then_ends_the_run(monkeypatch):
    import wandb

    class Summary(dict):
        pass

    class WandbLogger:  # the real one's type name is what finish() looks for
        experiment = type("Run", (), {"summary": Summary()})()

    ended = []
    monkeypatch.setattr(wandb, "finish", lambda exit_code=None: ended.append(exit_code))
    lg = WandbLogger()
    loggers.finish([lg], rec(metrics={"test/acc": 0.5}))
    assert lg.experiment.summary["test/acc"] == 0.5 and ended == [0]
    loggers.finish([object()], rec())  # no W&B logger: nothing to end
    assert ended == [0]


def test_the_exit_code_w_b_gets_is_the_process_s():
    """What the pipeline hands to ``finish`` as a run ends: a crash 1 (W&B showed a crashed run finished), a user's
    mistake 2, a signal's stop its 130 / 143, a finished run 0."""
    from coda_exp.errors import UserError, exit_status

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemExit(1)  # what Lightning makes of a Ctrl-C
    except SystemExit as err:
        lightning = err
    assert [exit_status(e) for e in (None, RuntimeError("bug"), UserError("typo"), SystemExit(143),
                                     SystemExit(None), SystemExit("message"), KeyboardInterrupt(), lightning)
            ] == [0, 1, 2, 143, 0, 1, 130, 130]


def _offline_ids(folder: Path) -> list[str]:
    """The run ids of ``folder``'s offline W&B runs: ``offline-run-<date>_<time>-<id>``, where W&B adds ``-1`` to a
    second folder of one id started within the same second."""
    import re

    return sorted(re.match(r"offline-run-\d{8}_\d{6}-([^-]+)", p.name).group(1)
                  for p in (folder / "wandb").glob("offline-run-*"))


def test_offline_run_then_resume_continue_one_wandb_run(compose, tmp_path, monkeypatch):
    """The real thing, offline: a run stopped by Ctrl-C, then resumed from its checkpoint (from another Hydra
    folder, as a new command would be), log into one W&B run id; the stopped one ends failed (exit code 130: W&B
    showed it finished before), the resumed one finished."""
    import wandb

    codes, real = [], wandb.finish
    monkeypatch.setattr(wandb, "finish", lambda exit_code=None: (codes.append(exit_code), real(exit_code=exit_code)))
    base = ["task=snli", "scale=fixture", "logger=wandb", "save_record=false", "save_predictions=false",
            "task.epochs=2"]
    with pytest.raises(SystemExit):
        run(compose([*base, "+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=2",
                     "+callbacks.sig.signum=2"], tmp_path))
    first = _offline_ids(tmp_path / "run")
    assert len(first) == 1 and codes == [130]
    run(compose([*base, f"ckpt_path={tmp_path}/run/checkpoints/interrupted.ckpt",
                 f"paths.output_dir={tmp_path}/resumed"], tmp_path))
    ids = _offline_ids(tmp_path / "run")
    assert len(ids) == 2 and set(ids) == set(first)  # a second offline run directory, the same id
    assert codes == [130, 0]


@pytest.mark.parametrize("logger", ["csv", "tensorboard"])
def test_a_resumed_run_continues_its_csv_and_tensorboard_version(compose, tmp_path, logger):
    """A run stopped (Ctrl-C at step 7) and resumed from its last.ckpt (step 5, the first epoch's validation; from
    another Hydra folder) logs into one version folder, as its W&B run is one: it used to start version_1 beside
    version_0, splitting the run's metrics. Each step's training loss is there once: the first process's up to the
    checkpoint, then the resumed run's (the steps it trains again are not doubled)."""
    import csv

    base = ["task=snli", "scale=fixture", f"logger={logger}", "save_record=false", "save_predictions=false",
            "task.epochs=2", "trainer.log_every_n_steps=1"]
    with pytest.raises(SystemExit):
        run(compose([*base, "+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=7",
                     "+callbacks.sig.signum=2"], tmp_path))
    folder = tmp_path / "run" / logger
    run(compose([*base, f"ckpt_path={tmp_path}/run/checkpoints/last.ckpt", f"paths.output_dir={tmp_path}/resumed"],
                tmp_path))
    assert sorted(p.name for p in folder.iterdir()) == ["version_0"]
    if logger == "csv":
        with open(folder / "version_0" / "metrics.csv", newline="") as f:
            steps = [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss_step")]
    else:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(folder / "version_0"))
        events.Reload()
        steps = [e.step for e in events.Scalars("train/loss_step")]
    assert steps == list(range(10)), steps  # 2 epochs of 5 steps, each once


def _metrics_csv(folder: Path, steps: range) -> Path:
    folder.mkdir(parents=True)
    (folder / "hparams.yaml").write_text("seed: 1\n")
    path = folder / "metrics.csv"
    path.write_text("epoch,step,train/loss_step\n" + "".join(f"0,{s},{s / 10}\n" for s in steps))
    return path


def test_a_resumed_csv_logger_keeps_the_rows_before_its_step_through_public_names_only(tmp_path, recwarn):
    """The rows of the steps the checkpoint holds are kept, the later ones dropped, and the resumed run's rows follow
    under the same columns. It overrode a private method of Lightning's ExperimentWriter (_check_log_dir_exists),
    which an upgrade could rename or drop silently: the file deleted again, the earlier rows lost. No class here
    overrides a private name of a Lightning class now."""
    import csv
    import inspect

    path = _metrics_csv(tmp_path / "csv" / "version_0", range(10))
    logger = loggers.ResumedCSVLogger(str(tmp_path), name="csv", version=0, resume_step=5)
    logger.log_metrics({"train/loss_step": 0.55, "val/acc": 0.5}, step=5)
    logger.save()
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3, 4, 5] and rows[5]["val/acc"] == "0.5"
    assert rows[0]["train/loss_step"] == "0.0" and not path.with_name("metrics.csv.resumed").exists()
    assert not [w for w in recwarn if "will be deleted" in str(w.message)]  # Lightning's warning: not so here
    private = [f"{cls.__name__}.{name}" for cls in vars(loggers).values() if inspect.isclass(cls)
               and cls.__module__ == loggers.__name__ for name in vars(cls)
               if name.startswith("_") and not name.startswith("__") and name != "_abc_impl"  # (ABCMeta's own)
               and any(name in vars(base) for base in cls.__mro__[1:] if base.__module__.startswith(("lightning",
                                                                                                     "pytorch_lightning")))]
    assert private == []


def test_rows_moved_aside_by_a_killed_resume_are_read_by_the_next(tmp_path):
    """A process killed between moving metrics.csv aside and writing its kept rows back loses nothing: the next
    resumed run reads them from metrics.csv.resumed."""
    path = _metrics_csv(tmp_path / "csv" / "version_0", range(8))
    path.rename(path.with_name("metrics.csv.resumed"))
    logger = loggers.ResumedCSVLogger(str(tmp_path), name="csv", version=0, resume_step=3)
    logger.log_metrics({"train/loss_step": 0.33}, step=3)
    logger.save()
    assert [line.split(",")[1] for line in path.read_text().splitlines()[1:]] == ["0", "1", "2", "3"]
    assert not path.with_name("metrics.csv.resumed").exists()


def test_wandb_is_not_given_the_anonymous_setting_it_warns_of(make_cfg):
    """Lightning passed anonymous=None, and wandb printed "The anonymous setting has no effect..." on every run."""
    assert "anonymous" not in _wandb(make_cfg("task=snli", "logger=wandb"))
    assert _wandb(make_cfg("task=snli", "logger=wandb", "+logger.wandb.anonymous=true"))["anonymous"] == "allow"


@pytest.fixture(scope="module")
def logged_run(compose, tmp_path_factory):
    """A fixture run of 3 epochs logged to CSV, TensorBoard and W&B (offline): (its folder, its record)."""
    from coda_exp import results

    folder = tmp_path_factory.mktemp("logged")
    run(compose(["task=snli", "scale=fixture", "logger=[csv,tensorboard,wandb]", "task.epochs=3",
                 "save_predictions=false"], folder))
    (record,) = results.load_records(folder / "results" / "runs", strict=True)
    return folder / "run", record


def test_the_curves_hold_the_validations_made_in_training_only(logged_run):
    """The tested checkpoint is validated again after fit: that validation was logged into every logger's val/acc
    at the last step (the curve seemed to rise at its end). Its metrics are the record's (and W&B's summary); each
    logger's curve has one point per validation made during training, at Lightning's step (record step - 1)."""
    import csv

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.wandb_files import logged, offline_runs

    folder, record = logged_run
    during = [s - 1 for s in record["val_curve_steps"]]
    assert during == [4, 9, 14] and "val/acc" in record["metrics"] and "test/acc" in record["metrics"]
    with open(folder / "csv" / "version_0" / "metrics.csv", newline="") as f:
        assert [int(r["step"]) for r in csv.DictReader(f) if r.get("val/acc")] == during
    events = EventAccumulator(str(folder / "tensorboard" / "version_0"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/acc")] == during
    (wandb_run,) = offline_runs(folder)
    assert [s for s, _ in logged(wandb_run, "val/acc")] == during
    assert logged(wandb_run, "test/acc") == [(15, pytest.approx(record["metrics"]["test/acc"]))]
    assert wandb_run["summary"]["val/acc"] == pytest.approx(record["metrics"]["val/acc"])  # the tested checkpoint's


def test_the_wandb_config_names_the_run_from_its_start_and_the_record_names_the_wandb_run(logged_run):
    """W&B's config held the resolved config alone: the fingerprint, scale label and run id came in the summary at
    the end (absent from a crashed or stopped part), the overrides and commit nowhere one can filter on. The record
    named no W&B run: a table cell led to the dashboard through the run folder's wandb_id.txt only."""
    import yaml

    from tests.wandb_files import offline_runs

    folder, record = logged_run
    (wandb_run,) = offline_runs(folder)
    fields = wandb_run["config"]["run"]
    assert fields == {"run_id": record["run_id"], "fingerprint": record["fingerprint"], "scale": "fixture (task.epochs=3)",
                      "experiment": None, "overrides": record["overrides"], "git_commit": record["git_commit"]}
    assert "task.epochs=3" in fields["overrides"] and wandb_run["config"]["seed"] == 1  # beside the resolved config
    hparams = yaml.safe_load((folder / "csv" / "version_0" / "hparams.yaml").read_text())
    assert hparams["run"]["run_id"] == record["run_id"]  # every logger's config has them
    kept = (folder / loggers.WANDB_ID_FILE).read_text().strip()
    assert record["wandb"] == {"id": kept, "project": "coda-exp", "entity": None, "group": wandb_run["run"]["group"],
                               "mode": "offline", "url": None}
    assert wandb_run["run"]["id"] == kept


def test_tensorboard_has_no_placeholder_hp_metric(logged_run):
    """Lightning's default hp_metric was -1 for every run (logged again on each resume): the HPARAMS tab showed -1
    as every run's only metric."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logged_run[0] / "tensorboard" / "version_0"))
    events.Reload()
    assert "hp_metric" not in events.Tags()["scalars"] and "val/acc" in events.Tags()["scalars"]


def test_an_offline_wandb_file_read_while_it_is_written_yields_its_whole_records():
    """The tests' reader of ``.wandb`` files (``tests/wandb_files``) stops at a record W&B's service has not finished
    writing (read so, it failed to parse: "Wire format was corrupt"), and the poller reads the file again later."""
    import struct

    from tests.wandb_files import HEADER, _chunks

    def record(payload: bytes) -> bytes:
        return struct.pack("<IHB", 0, len(payload), 1) + payload  # a full record (type 1)

    whole = b"\0" * HEADER + record(b"first") + record(b"second")
    assert list(_chunks(whole)) == [b"first", b"second"]
    assert list(_chunks(whole[:-3])) == [b"first"]  # the second cut mid-payload
