"""Checks before the first step (config values, output folders) and the run's outputs never lost after the last."""

import json
import math
import os

import pytest

from coda_exp import results, run_folder
from coda_exp.config_checks import ConfigError
from coda_exp.errors import UserError
from coda_exp.pipeline import run
from coda_exp.run_record import RecordWriteError


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if the run gets as far as loading data or building anything."""
    monkeypatch.setattr("coda_exp.pipeline.instantiate", lambda *a, **k: pytest.fail("data loaded before the check"))


@pytest.mark.parametrize("override,message", [
    ("trainer.max_epochs=abc", "trainer.max_epochs = 'abc': expected an int >= 1 or -1 or null"),
    ("task.epochs=-1", "task.epochs = -1: expected an int >= 1"),
    ("data.batch_size=-4", "data.batch_size = -4: expected an int >= 1"),
    ("optimizer.lr=0", "optimizer.lr = 0: expected a number > 0"),
    ("+task.val_check_interval=1.5", "task.val_check_interval = 1.5: expected an int >= 1 (batches), a float in"),
])
def test_a_bad_config_value_names_its_key_before_any_data(make_cfg, no_data, override, message):
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "scale=fixture", override))
    assert message in str(err.value)


@pytest.mark.parametrize("task,overrides,messages", [
    # a negative cap used to slice tokens away silently (issue 20)
    ("quasart", ["model=decaprop", "data.max_len_passage_eval=-5", "data.max_len_query=-1"],
     ["data.max_len_passage_eval = -5: expected an int >= 1 or null", "data.max_len_query = -1: expected an int"]),
    ("fever", ["model=attconv_light", "data.max_len_claim=0", "data.retrieval.pages=-1"],
     ["data.max_len_claim = 0", "data.retrieval.pages = -1"]),
    ("imdb", ["model=transformer_classifier", "data.max_len=-3", "data.val_fraction=1.5"],
     ["data.max_len = -3", "data.val_fraction = 1.5: expected a number in [0, 1)"]),
    ("mlu", ["model=transformer", "data.num_test=0"], ["data.num_test = 0"]),
    # model sizes and rates used to fail inside torch after the data loaded
    ("quasart", ["model=decaprop", "model.hidden_size=-5", "model.dropout=1.5"],
     ["model.hidden_size = -5: expected an int >= 1", "model.dropout = 1.5: expected a probability in [0, 1)"]),
    ("mlu", ["model=coda_transformer", "model.num_heads=0", "model.attention_dropout=-0.1"],
     ["model.num_heads = 0", "model.attention_dropout = -0.1"]),
    # a schedule that cannot warm up within the budget used to fail in configure_optimizers, after the data
    ("mlu", ["model=transformer", "scale=cpu", "task.max_steps=30"],
     ["task.cpu_scheduler.warmup_steps = 200 exceeds task.max_steps = 30",
      "e.g. task.cpu_scheduler.warmup_steps=3: another configuration, which the paper tables list apart"]),
    ("mlu", ["model=coda_transformer", "model.scoring.kernel=fastest"],
     ["model.scoring.kernel: CoDA option kernel must be one of"]),
    # a kernel that cannot run the configuration used to run another one silently
    ("mlu", ["model=coda_transformer", "model.scoring.kernel=fused", "model.scoring.center_n=true"],
     ["model.scoring.kernel: CoDA option kernel 'fused' cannot run centred CoDA"]),
    ("mlu", ["model=coda_transformer", "model.scoring.kernel=flash", "model.scoring.center_n=true"],
     ["model.scoring.kernel: CoDA option kernel 'flash' centres (center_e / center_n) on CUDA only"]),
])
def test_data_model_schedule_and_kernel_values_are_checked_before_any_data(make_cfg, no_data, task, overrides,
                                                                          messages):
    with pytest.raises(ConfigError) as err:
        run(make_cfg(f"task={task}", "scale=fixture", *overrides))
    for message in messages:
        assert message in str(err.value)


@pytest.mark.parametrize("overrides,message", [
    (["trainer.precision=bf17-mixed"], ("trainer (accelerator=cpu, devices=1, precision=bf17-mixed): Lightning "
                                        "refuses these settings: Precision 'bf17-mixed' is invalid. Allowed")),
    (["+trainer.no_such_argument=1"], "unexpected keyword argument 'no_such_argument'"),
    # Lightning ran it as bf16-mixed (a warning on stderr) while the record and its fingerprint said 16-mixed
    (["trainer.precision=16-mixed"], ("trainer.precision=16-mixed: float16 mixed precision needs a GPU, and this ")),
    (["trainer.precision=16-mixed"], ("(Lightning would run bf16-mixed instead, while the record would say 16-mixed): "
                                      "use trainer.precision=32-true or bf16-mixed")),  # (coda-exp eval's words too)
    (["trainer.precision=16"], "use trainer.precision=32-true or bf16-mixed"),
    # float16 weights: Adam's eps 1e-8 is 0 there; the run ended "diverged at step 2" with status 0
    (["trainer.precision=16-true"], ("trainer.precision=16-true: the weights and Adam's state would be float16, where "
                                    "its eps=1e-08 is 0")),
    (["trainer=gpu_fast", "trainer.accelerator=cpu", "trainer.devices=[3]"], "devices"),
    # Lightning's own refusal came after the data, from Hydra's instantiate, naming ModelCheckpoint only
    (["+trainer.enable_checkpointing=false"], ("trainer.enable_checkpointing=false, but the run's checkpoint "
                                               "callbacks (callbacks.model_checkpoint, callbacks.last_checkpoint)")),
])
def test_trainer_settings_lightning_refuses_are_one_message_before_any_data(make_cfg, no_data, overrides, message):
    """They used to fail in Trainer(...) once the data had loaded, with a traceback and exit 1."""
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "scale=fixture", *overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("trainer", ["gpu", "gpu_fast", "ddp"])
def test_a_gpu_trainer_without_a_gpu_says_so_before_any_data(make_cfg, no_data, monkeypatch, trainer):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"trainer.accelerator=gpu: torch finds no CUDA GPU on this machine \(torch "
                                          r".*\): run it on a GPU machine, or on the CPU with trainer=cpu"):
        run(make_cfg("task=snli", "scale=fixture", f"trainer={trainer}"))


@pytest.mark.parametrize("capability,precision,message", [
    ((7, 0), "32-true", "its Triton kernels need a GPU of compute capability 7.5 or newer, this one is 7.0"),
    ((7, 5), "bf16-mixed", ("bfloat16 needs a GPU of compute capability 8.0 or newer (Triton's bfloat16 dot), "
                            "this one is 7.5")),
    ((7, 5), "16-mixed", None), ((9, 0), "bf16-mixed", None)])
def test_kernel_flash_on_a_gpu_it_cannot_run_on_stops_the_run_at_start(make_cfg, monkeypatch, capability, precision,
                                                                        message):
    """kernel=flash on a V100 (7.0), or in bfloat16 on a T4 (7.5), would stop at the first CoDA forward."""
    from coda_exp.attention import dispatch
    from coda_exp.run_checks import check_kernels

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.current_device", lambda: 0)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "Tesla T")
    monkeypatch.setattr("torch.cuda.get_device_capability", lambda *a: capability)
    monkeypatch.setattr(dispatch, "_CAPABILITIES", {})
    cfg = make_cfg("task=mlu", "model=coda_transformer", "scale=fixture", "trainer=gpu", "model.scoring.kernel=flash",
                   f"trainer.precision={precision}")
    if message is None:
        check_kernels(cfg)
        return
    with pytest.raises(ConfigError) as err:
        check_kernels(cfg)
    assert str(err.value) == (f"model.scoring.kernel: CoDA option kernel 'flash' cannot run on this GPU (Tesla T): "
                              f"{message}; use 'auto' (the chunked kernel there)")


@pytest.mark.parametrize("variable", ["CODA_KERNEL", "CODA_FLASH_BACKWARD"])
def test_a_bogus_coda_kernel_in_the_environment_stops_the_run_at_start(make_cfg, no_data, monkeypatch, variable):
    """CODA_FLASH_BACKWARD=bogus used to pass a CPU run by unnoticed, and stop a GPU run at its first forward."""
    monkeypatch.setenv(variable, "bogus")
    with pytest.raises(ConfigError, match=f"environment variable {variable} must be one of"):
        run(make_cfg("task=mlu", "model=coda_transformer", "scale=fixture"))


def test_every_bad_value_is_listed_once(make_cfg, no_data):
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=snli", "task.epochs=0", "data.eval_batch_size=x", "seed=1.5"))
    lines = str(err.value).splitlines()[1:]
    assert [line.split(" =")[0].strip() for line in lines] == ["seed", "task.epochs", "data.eval_batch_size"]
    # trainer.max_epochs and task.patience follow ${task.epochs}: reported through task.epochs only


def test_unwritable_results_folder_fails_before_any_data(make_cfg, no_data, tmp_path):
    (tmp_path / "blocked").write_text("a file where a folder should be")
    with pytest.raises(run_folder.OutputDirError) as err:
        run(make_cfg("task=snli", "scale=fixture", f"paths.results_dir={tmp_path}/blocked/results"))
    assert (f"paths.results_dir (runs/): {tmp_path}/blocked/results/runs cannot be made: {tmp_path}/blocked is a "
            "file, not a folder") in str(err.value)  # it said "is not writable (File exists)"
    with pytest.raises(run_folder.OutputDirError) as err:  # a read-only cache was datasets' traceback as data loaded
        run(make_cfg("task=snli", "scale=fixture", f"paths.cache_dir={tmp_path}/blocked/cache"))
    assert f"data.cache_dir: {tmp_path}/blocked/cache/fixture cannot be made: {tmp_path}/blocked is a" in str(err.value)


def test_a_record_that_cannot_be_written_goes_to_a_named_fallback(make_cfg, tmp_path, monkeypatch, capsys):
    def refuse(record, runs_dir, **kw):
        raise PermissionError(13, "Permission denied", str(runs_dir))

    monkeypatch.setattr(results, "write_record", refuse)
    with pytest.raises(RecordWriteError) as err:
        run(make_cfg("task=wikiqa", "scale=fixture", "task.epochs=1", "logger=none"))
    fallback = tmp_path / "run" / "run_record.json"
    assert f"the run record is at {fallback}" in str(err.value) and "Permission denied" in str(err.value)
    record = results.validate_record(json.loads(fallback.read_text()))
    assert record[results.CHECKSUM_KEY] == results.record_checksum(record)  # sealed as results/runs/ records are
    assert "test/map" in capsys.readouterr().out  # the metric summary was printed anyway
    assert os.path.isfile(record["predictions"])  # the record points at its predictions: none orphaned
    assert isinstance(err.value, UserError)  # one message and exit status 2, not a traceback: nothing was lost


def test_a_taken_folder_is_never_shared(tmp_path):
    first = run_folder.claim(tmp_path / "run")
    second = run_folder.claim(tmp_path / "run")
    assert first == tmp_path / "run" and second == tmp_path / "run-2"
    # a resume takes over the claim of a dead process, never the claim of a live one
    (tmp_path / "run" / run_folder.OWNER).write_text(json.dumps({"host": os.uname().nodename, "pid": 2 ** 22 + 7}))
    assert run_folder.claim(tmp_path / "run", resume=True) == tmp_path / "run"
    (tmp_path / "run" / run_folder.OWNER).write_text(json.dumps({"host": os.uname().nodename, "pid": os.getppid()}))
    with pytest.raises(run_folder.OutputDirError, match="in use by process"):
        run_folder.claim(tmp_path / "run", resume=True)


def test_an_owner_whose_pid_now_belongs_to_another_process_is_stale(tmp_path):
    """The owner file records the process's start time: a live process with the owner's pid that started at another
    time (the pid reused) does not hold the folder; an owner file without the time is judged by the pid, as before."""
    folder = run_folder.claim(tmp_path / "run")
    mine = json.loads((folder / run_folder.OWNER).read_text())
    assert mine["pid"] == os.getpid() and mine["started"] == run_folder._start_time(os.getpid())
    parent, host = os.getppid(), os.uname().nodename
    started = run_folder._start_time(parent)
    for owner, held in (({"host": host, "pid": parent, "started": started}, True),
                        ({"host": host, "pid": parent, "started": started + 1}, False),  # another process now
                        ({"host": host, "pid": parent}, True)):  # an older owner file: the pid alone
        (folder / run_folder.OWNER).write_text(json.dumps(owner))
        assert bool(run_folder.live_owner(folder)) is held, owner
    (folder / run_folder.OWNER).write_text(json.dumps({"host": host, "pid": parent, "started": started + 1}))
    assert run_folder.claim(folder, resume=True) == folder  # resumable: the stale claim taken over


def test_a_run_folder_that_cannot_be_written_is_one_message(tmp_path, monkeypatch):
    """Resuming into a folder made read-only since (or a fresh run's folder): one OutputDirError naming it, not a
    PermissionError's traceback from writing .run_owner (tests run as root, whom chmod does not stop)."""
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if str(path).endswith(run_folder.OWNER):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    (tmp_path / "run").mkdir()
    monkeypatch.setattr(run_folder.os, "open", refuse)
    with pytest.raises(run_folder.OutputDirError, match=r"run: the run folder cannot be written \(Permission "
                       r"denied\): make it writable again"):
        run_folder.claim(tmp_path / "run", resume=True)
    with pytest.raises(run_folder.OutputDirError, match="fix the permissions or point paths.log_dir"):
        run_folder.claim(tmp_path / "run")
    monkeypatch.undo()
    (tmp_path / "file").write_text("")
    with pytest.raises(run_folder.OutputDirError, match="file/run: the run folder cannot be written"):
        run_folder.claim(tmp_path / "file" / "run")


def test_two_runs_in_one_folder_write_apart(make_cfg, tmp_path):
    for _ in range(2):
        run(make_cfg("task=snli", "scale=fixture", "task.epochs=1", "logger=none", "save_predictions=false"))
    a, b = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert (a["output_dir"], b["output_dir"]) == (str(tmp_path / "run"), str(tmp_path / "run-2"))
    assert (tmp_path / "run-2" / "checkpoints" / "last.ckpt").is_file()


def _plain_train(args, tmp_path):
    """train.py as a user runs it: without HYDRA_FULL_ERROR (the helpers set it to see every frame)."""
    import os
    import subprocess
    import sys

    from tests import ROOT

    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    cmd = [sys.executable, str(ROOT / "train.py"), *args, f"paths.results_dir={tmp_path}/results",
           f"paths.log_dir={tmp_path}/outputs", f"paths.cache_dir={tmp_path}/cache", "logger=none"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.mark.parametrize("args,message", [
    # ~7 s (a process): the same message in-process above (test_data_model_schedule_and_kernel_values_...)
    pytest.param(["task=mlu", "model=transformer", "scale=cpu", "task.max_steps=30"],
                 "task.cpu_scheduler.warmup_steps = 200", marks=pytest.mark.slow),
    # refused before the run's folder is chosen (it was found as the data loaded, the run listed as failed)
    (["task=wikiqa", "scale=fixture", "data.dir=/nonexistent/wikiqa"], "does not exist: expected a folder holding"),
])
def test_a_users_mistake_is_one_message_and_exit_status_2(tmp_path, args, message):
    proc = _plain_train(args, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr  # errors found before the run's log opens go to stderr, later ones to the log
    assert output.count(message) == 1 and "Traceback" not in output and "HYDRA_FULL_ERROR" not in output
    assert not list((tmp_path / "outputs").rglob("train.log"))  # no run folder: refused, nothing to resume or list


def test_a_crash_keeps_its_traceback_and_exit_status_1(tmp_path):
    proc = _plain_train(["task=wikiqa", "scale=fixture", "task.epochs=1",
                         "+callbacks.boom._target_=tests.e2e.kill_hook.Boom"], tmp_path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "boom: a bug" in proc.stderr


@pytest.mark.parametrize("fast", [False, True])
def test_a_diverging_run_stops_at_its_first_non_finite_loss_and_is_recorded_as_diverged(make_cfg, tmp_path, fast):
    """optimizer.lr=1e8 used to train every epoch on NaN, then fail at the end writing no record (issue 20)."""
    from coda_exp import table_render, tables
    from tests import ROOT

    extra = ["trainer=gpu_fast", "trainer.accelerator=cpu", "fast.log_every=1"] if fast else []
    run(make_cfg("task=wikiqa", "scale=fixture", "optimizer.lr=1e8", "task.epochs=3", "logger=none", *extra))
    (rec,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert rec["status"] == "diverged" and rec["metrics"] == {} and rec["steps"] <= 3
    assert 1 <= rec["diverged_at_step"] <= 3 and all(v is None or math.isfinite(v) for v in rec["val_curve"])
    spec = tables.load_table_spec(ROOT / "configs" / "tables" / "table_2.yaml")
    md = table_render.render_markdown(tables.build_table(spec, [rec]))
    assert f"Not pooled, diverged at step {rec['diverged_at_step']}" in md and rec["run_id"] in md
    assert "n=1" not in md  # never pooled


def test_a_foreign_checkpoint_is_refused_before_its_folder_is_touched(make_cfg, compose, tmp_path):
    """Resuming task=snli from a DecompAtt WikiQA run's checkpoint used to take that folder over (owner file, a
    resumed config, "run failed" in its train.log) before failing on missing keys (issue 20)."""
    import shutil

    from coda_exp.checkpoint_avg import CheckpointError

    run(compose(["task=wikiqa", "scale=fixture", "task.epochs=1", "logger=none"], tmp_path / "theirs"))
    folder = tmp_path / "theirs" / "run"
    last = folder / "checkpoints" / "last.ckpt"
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with pytest.raises(CheckpointError, match="a checkpoint of task=wikiqa model=decompatt .* this run is "
                                              "task=snli model=attconv_light"):
        run(make_cfg("task=snli", "model=attconv_light", "scale=fixture", f"ckpt_path={last}"))
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    # outside a run folder there is no config to compare: the weights are, before training
    alone = tmp_path / "alone.ckpt"
    shutil.copy(last, alone)
    with pytest.raises(CheckpointError, match="another configuration than this run's .*model.hidden_size: 200 there, "
                                              "7 here"):
        run(make_cfg("task=wikiqa", "model=decompatt", "scale=fixture", "model.hidden_size=7", f"ckpt_path={alone}"))
    with pytest.raises(CheckpointError, match="its weights do not fit this run's model"):  # resume=force: the weights
        run(make_cfg("task=wikiqa", "model=decompatt", "scale=fixture", "model.hidden_size=7", f"ckpt_path={alone}",
                     "resume=force"))


def test_a_checkpoint_of_another_configuration_is_refused_naming_the_keys(make_cfg, compose, tmp_path):
    """A run resumed with another optimizer.lr went on silently under the checkpoint's optimizer state, and its
    record stated the new configuration; a longer budget (task.epochs, and task.patience that follows it) is fine."""
    from coda_exp.checkpoint_avg import CheckpointError

    run(compose(["task=wikiqa", "scale=fixture", "task.epochs=1", "optimizer.lr=0.01", "logger=none"],
                tmp_path / "theirs"))
    last = tmp_path / "theirs" / "run" / "checkpoints" / "last.ckpt"
    with pytest.raises(CheckpointError, match=r"another configuration than this run's \(optimizer.lr: 0.01 there, "
                                              r"0.0003 here\): resume it with the overrides it was trained with"):
        run(make_cfg("task=wikiqa", "scale=fixture", "task.epochs=2", f"ckpt_path={last}"))
    run(make_cfg("task=wikiqa", "scale=fixture", "task.epochs=2", "optimizer.lr=0.01", "logger=none",
                 f"ckpt_path={last}"))
    records = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert [r["steps"] > 0 for r in records] == [True] * len(records) and records


def test_a_finished_run_is_never_trained_again_nor_its_folder_written(compose, tmp_path):
    """ckpt_path=<a finished run's last.ckpt> with its budget re-tested it and wrote another record each time (which
    plots pooled): refused naming the record; so is any earlier checkpoint of it (it retrained the same run and
    wrote a second record). A raised budget, or resume=force under another configuration, trains on from it as a
    new run in a new folder: they trained in the finished run's own folder and overwrote its last.ckpt."""
    from coda_exp.checkpoint_avg import CheckpointError

    base = ["task=wikiqa", "scale=fixture", "task.epochs=2", "logger=none", "save_predictions=false",
            "callbacks.model_checkpoint.save_top_k=-1"]
    run(compose(base, tmp_path))
    (record,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    folder = tmp_path / "run"
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    last = folder / "checkpoints" / "last.ckpt"
    with pytest.raises(CheckpointError, match=rf"ckpt_path={last}: its run finished already at step "
                                              rf"{record['steps']} \(record {tmp_path}/results/runs/.*\.json\) "
                                              "with this budget.*coda-exp eval ckpt_path="):
        run(compose([*base, f"ckpt_path={last}", f"paths.output_dir={tmp_path}/again"], tmp_path))
    (earlier,) = (folder / "checkpoints").glob("epoch000-*.ckpt")
    with pytest.raises(CheckpointError, match=rf"ckpt_path={earlier}: a checkpoint at step \d+ of a run that "
                                              rf"finished already at step {record['steps']} .*a second record of it"
                                              r".*coda-exp eval ckpt_path=.*resume=force"):
        run(compose([*base, f"ckpt_path={earlier}", f"paths.output_dir={tmp_path}/earlier"], tmp_path))
    assert len(results.load_records(tmp_path / "results" / "runs", strict=True)) == 1
    run(compose([*base, "task.epochs=3", f"ckpt_path={last}", f"paths.output_dir={tmp_path}/longer"], tmp_path))
    run(compose([*base, "optimizer.lr=0.01", "resume=force", f"ckpt_path={earlier}",
                 f"paths.output_dir={tmp_path}/forced"], tmp_path))
    by_folder = {r["output_dir"]: r for r in results.load_records(tmp_path / "results" / "runs", strict=True)}
    assert set(by_folder) == {str(folder), str(tmp_path / "longer"), str(tmp_path / "forced")}
    assert by_folder[str(tmp_path / "longer")]["steps"] > record["steps"]
    assert by_folder[str(tmp_path / "forced")]["resumed_from"] == str(earlier)
    for new in ("longer", "forced"):  # the best over the whole run: the finished run's best kept (never deleted)
        best = by_folder[str(tmp_path / new)]["best_checkpoint"]
        assert best.startswith(f"{tmp_path / new}/checkpoints/") or best in map(str, before), best
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_a_run_moved_to_another_folder_writes_nothing_into_the_first_runs_log(tmp_path):
    """Two runs started with one hydra.run.dir: the second moves to <dir>-2, and Hydra's log handler, which still
    points at <dir>/train.log, is detached meanwhile (it used to write the second run's lines there; issue 20)."""
    import socket

    from tests.e2e.helpers import train

    taken = tmp_path / "same"  # another run's folder: its owner file and its log, as a first run leaves them
    taken.mkdir()
    (taken / run_folder.OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    (taken / "train.log").write_text("[the first run's log]\n")
    log_before = (taken / "train.log").read_text()
    args = ["task=wikiqa", "scale=fixture", "task.epochs=1", f"hydra.run.dir={taken}"]
    second = train([*args, "seed=2"], tmp_path / "b")
    assert second.returncode == 0, second.stderr[-2000:]
    assert (tmp_path / "same" / "train.log").read_text() == log_before
    moved = (tmp_path / "same-2" / "train.log").read_text()
    assert "run folder:" in moved and "run record:" in moved


def test_more_cpu_processes_than_cores_is_said_before_any_data(make_cfg, caplog, monkeypatch):
    """trainer.devices=4 on a 2-core machine started 4 DDP processes without a word."""
    from coda_exp.run_checks import check_trainer

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    check_trainer(make_cfg("task=snli", "scale=fixture", "trainer.devices=4"))
    assert "trainer.devices=4 on the CPU: 4 DDP processes on a machine with 2 cores" in caplog.text
    caplog.clear()
    check_trainer(make_cfg("task=snli", "scale=fixture", "trainer.devices=2"))
    assert "DDP processes" not in caplog.text


def test_a_step_budget_cut_short_by_the_epoch_cap_is_a_warning_in_the_record(make_cfg, tmp_path):
    """task.max_steps=600 at scale=fixture (8 epochs of the data's batches) ran fewer steps without a word."""
    run(make_cfg("task=mlu", "model=transformer", "scale=fixture", "task.epochs=1", "task.max_steps=600",
                 "task.val_check_interval=10", "logger=none"))
    (rec,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    said = [w for w in rec["warnings"] if "before trainer.max_steps=600" in w]
    steps = rec["steps"]
    assert steps < 600 and said == [(f"trainer.max_epochs=1 (task.epochs) ends training after {steps} steps ({steps} "
                                     f"an epoch), before trainer.max_steps=600: raise task.epochs to at least "
                                     f"{-(-600 // steps)} for the steps to count")]  # once: not again after training


def test_a_step_budget_the_epoch_cap_ends_first_is_said_before_training(make_cfg, monkeypatch, caplog):
    """It was said only once training had stopped short (the fixture's 8 epochs under task.max_steps=300 of MLU: 200
    steps run, then the warning): now before the first step, from the training loader's length."""
    import pytorch_lightning as pl

    def fit(*args, **kwargs):
        raise RuntimeError("no training in this test")

    monkeypatch.setattr(pl.Trainer, "fit", fit)
    with pytest.raises(RuntimeError, match="no training"):
        run(make_cfg("task=mlu", "model=transformer", "scale=fixture", "task.epochs=2", "task.max_steps=300",
                     "logger=none"))
    assert ("trainer.max_epochs=2 (task.epochs) ends training after 50 steps (25 an epoch), before "
            "trainer.max_steps=300: raise task.epochs to at least 12 for the steps to count") in caplog.text
    caplog.clear()
    with pytest.raises(RuntimeError, match="no training"):  # accumulation: 2 batches a step, 13 steps an epoch
        run(make_cfg("task=mlu", "model=transformer", "scale=fixture", "task.epochs=2", "task.max_steps=30",
                     "+trainer.accumulate_grad_batches=2", "logger=none"))
    assert "ends training after 26 steps (13 an epoch), before trainer.max_steps=30" in caplog.text
    caplog.clear()
    with pytest.raises(RuntimeError, match="no training"):  # the budget within the epochs: nothing said
        run(make_cfg("task=mlu", "model=transformer", "scale=fixture", "logger=none"))
    assert "max_epochs" not in caplog.text


def test_a_batch_limit_below_one_batch_is_one_message_naming_the_key(make_cfg):
    """``trainer.limit_val_batches=0.5`` of a one-batch validation loader (UDC's fixture): Lightning's
    MisconfigurationException after the data had loaded, with a traceback and exit status 1; now one ConfigError
    naming the key, the loader's batches and a fraction that works."""
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=udc", "model=decompatt", "scale=fixture", "task.epochs=1", "trainer.limit_val_batches=0.5"))
    assert str(err.value) == ("trainer.limit_val_batches=0.5 keeps no batch of the validation loader's 1 (0.5 x 1 < 1): "
                              "use at least trainer.limit_val_batches=1.0, or a count of batches "
                              "(trainer.limit_val_batches=1)")


@pytest.mark.parametrize("override,split", [("trainer.limit_test_batches=0.5", "test"),
                                            ("trainer.limit_val_batches=0.5", "validation")])
def test_an_eval_batch_limit_below_one_batch_is_refused_before_training(make_cfg, monkeypatch, override, split):
    """``trainer.limit_test_batches=0.5`` of a one-batch test loader was refused by Lightning's test, after the whole
    training; ``limit_val_batches`` after the first training epoch where the sanity check is off. Both are refused
    before the first training step now, as ``limit_train_batches`` is."""
    import pytorch_lightning as pl

    def fit(*args, **kwargs):
        raise AssertionError("trained before the limit was refused")

    monkeypatch.setattr(pl.Trainer, "fit", fit)
    with pytest.raises(ConfigError) as err:
        run(make_cfg("task=udc", "model=decompatt", "scale=fixture", "task.epochs=1", "logger=none",
                     "trainer.num_sanity_val_steps=0", override))
    key = override.split("=")[0]
    assert str(err.value) == (f"{key}=0.5 keeps no batch of the {split} loader's 1 (0.5 x 1 < 1): use at least "
                              f"{key}=1.0, or a count of batches ({key}=1)")


@pytest.mark.parametrize("length,fraction", [(1, 1.0), (2, 0.5), (3, 0.34), (7, 0.15), (10, 0.1), (300, 0.0034)])
def test_the_smallest_batch_fraction_keeps_one_batch(length, fraction):
    from coda_exp.run_checks import smallest_fraction

    assert smallest_fraction(length) == fraction and int(length * fraction) >= 1
