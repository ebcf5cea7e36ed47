"""The fast path (``trainer=gpu_fast``) on the CPU at fixture scale: the code a GPU runs, minus the CUDA graph."""

import pytest

from coda_exp import results
from coda_exp.pipeline import run

FAST = ["trainer=gpu_fast", "trainer.accelerator=cpu", "logger=none"]
# generated MLU (the static-batch stream that resumes at the global step), small enough for seconds
GENERATED = ["task=mlu", "scale=fixture", "data.dir=null", "data.num_train=2000", "data.num_validation=24",
             "data.num_test=40", "data.batch_size=16", "task.max_steps=12", "task.val_check_interval=6"]


def record(folder) -> dict:
    (rec,) = results.load_records(folder / "results" / "runs", strict=True)
    return rec


@pytest.mark.parametrize("clip,graph", [(None, False), (None, True), pytest.param(0.05, False, marks=pytest.mark.slow)])
def test_fast_path_trains_what_the_plain_path_trains(compose, tmp_path, clip, graph, request):
    """Same batches (generated MLU within its first epoch), same steps, same model, same schedule (and the same
    gradient clipping: Lightning's on the plain path, the fast step's own on the fast path): the same result up to
    float order (fused Adam, padding to one shape). Without dropout: its masks are drawn over the padded shape, so
    with dropout the two paths draw different (equally distributed) masks. ``graph``: the CUDA-graph path, replays
    stood in for on the CPU (``fake_cuda``), across the validation at step 6 (before which Lightning sets every
    ``p.grad`` to None: a graph step that missed it froze every run on an H200 at its first validation)."""
    if graph:
        request.getfixturevalue("fake_cuda")
    no_dropout = ["model.dropout=0", "model.attention_dropout=0", "model.relu_dropout=0"]
    clipping = [] if clip is None else [f"+task.gradient_clip_val={clip}"]
    # the best checkpoint (the one tested) by val/loss, which moves with every step: by exact-match accuracy (0 this
    # early) it would be step 6's, and steps 7-12 would go unseen
    base = [*GENERATED, "model=transformer", "seed=2", "save_predictions=false", *no_dropout, *clipping,
            "task.monitor=val/loss", "task.monitor_mode=min"]
    run(compose([*base, "logger=none"], tmp_path / "plain"))
    run(compose([*base, *FAST], tmp_path / "fast"))
    plain, fast = record(tmp_path / "plain"), record(tmp_path / "fast")
    assert fast["steps"] == plain["steps"] == 12
    if graph:  # 3 warm-up steps, one capture, the rest replays
        assert (fast["fast"]["eager_steps"], fast["fast"]["graphs_captured"], fast["fast"]["graph_replays"]) == (3, 1, 9)
    else:
        assert fast["fast"]["eager_steps"] == 12 and fast["fast"]["graphs_captured"] == 0  # no CUDA on a CPU
    assert fast["fast"]["static_shapes"] and fast["fast"]["fallback"] is None
    assert fast["fast"]["gradient_clip_val"] == clip
    assert "fast" not in plain and fast["fingerprint"] == plain["fingerprint"]
    assert fast["val_curve_steps"] == [6, 12] and fast["val_curve"] == pytest.approx(plain["val_curve"], rel=1e-3)
    for key in ("val/loss", "test/loss", "test/acc_tok_tf", "test/nll"):
        assert fast["metrics"][key] == pytest.approx(plain["metrics"][key], rel=1e-3), key


@pytest.mark.parametrize("path,num_train", [pytest.param("fast", 2000, marks=pytest.mark.slow),
                                            pytest.param("plain", 2000, marks=pytest.mark.slow),  # mid-epoch resumes:
                                            # test_resume.py's in make test
                                            ("fast", 80), pytest.param("plain", 75, marks=pytest.mark.slow),
                                            # the plain path's checkpoint at an epoch's very end: test_resume.py's
                                            # (SNLI, step 5) in make test
                                            pytest.param("plain", 96, marks=pytest.mark.slow)])
def test_generated_mlu_resumes_where_it_stopped(compose, tmp_path, path, num_train):
    """Stopped at step 6 (its last.ckpt) and resumed: the uninterrupted run's curve and test, bit for bit: the
    static-batch stream restarts at the restored global step, the plain stream skips the epoch's trained batches;
    within the first epoch (2000 examples) and past epoch ends (80 or 75: 5 batches of 16 an epoch, the plain
    loader's last one partial; 96: the checkpoint at an epoch's very end)."""
    # validation by val/loss, which moves with every step (exact-match accuracy is 0 this early, so an equal curve
    # would not tell which batches the resumed steps trained on)
    base = [*GENERATED, "model=coda_transformer", "seed=4", *(FAST if path == "fast" else ["logger=none"]),
            "save_predictions=false", "task.monitor=val/loss", "task.monitor_mode=min", f"data.num_train={num_train}"]
    run(compose(base, tmp_path / "whole"))
    run(compose([*base, "task.max_steps=6"], tmp_path / "part"))
    last = tmp_path / "part" / "run" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    run(compose([*base, f"ckpt_path={last}"], tmp_path / "resumed"))
    whole, resumed = record(tmp_path / "whole"), record(tmp_path / "resumed")
    assert resumed["steps"] == whole["steps"] == 12 and resumed["resumed_from"] == str(last)
    assert resumed["val_curve_steps"] == whole["val_curve_steps"] == [6, 12]
    assert resumed["val_curve"] == whole["val_curve"] and resumed["metrics"] == whole["metrics"]


@pytest.mark.parametrize("path,signum,status", [
    # the plain path's stop: test_resume.py's in make test; the fast path's stop: graph (its stand-in CUDA graphs)
    pytest.param("plain", 2, 130, marks=pytest.mark.slow), pytest.param("fast", 15, 143, marks=pytest.mark.slow),
    ("graph", 15, 143)])
def test_a_signal_stops_at_the_step_s_end_with_a_checkpoint_the_resumed_run_equals_the_whole_run(
        compose, tmp_path, path, signum, status, request):
    """Ctrl-C (SIGINT) or SIGTERM at step 4, mid-epoch and between validations: the run saves interrupted.ckpt
    there, writes no record and exits 130 / 143 (Lightning's own Ctrl-C exits 1 with nothing saved); resumed from
    it, the run is the uninterrupted one, bit for bit. ``graph``: the fast path's CUDA graphs (stood in for on the
    CPU), as side_by_side's SIGTERM stops a Table 6 run on a GPU at the end of its budget; without dropout, as the
    stand-in's capture runs the step's body once more (drawing dropout masks a real capture does not draw), and the
    resumed run captures at another step than the whole one."""
    import signal

    no_dropout = []
    if path == "graph":
        request.getfixturevalue("fake_cuda")
        no_dropout = ["model.dropout=0", "model.attention_dropout=0", "model.relu_dropout=0"]

    base = [*GENERATED, "model=coda_transformer", "seed=4", *(FAST if path != "plain" else ["logger=none"]),
            "save_predictions=false", "task.monitor=val/loss", "task.monitor_mode=min", *no_dropout]
    run(compose(base, tmp_path / "whole"))
    hook = ["+callbacks.sig._target_=tests.e2e.kill_hook.SignalAtStep", "+callbacks.sig.step=4",
            f"+callbacks.sig.signum={signum}"]
    with pytest.raises(SystemExit) as stopped:
        run(compose([*base, *hook], tmp_path / "part"))
    assert stopped.value.code == status
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is given back
    saved = tmp_path / "part" / "run" / "checkpoints" / "interrupted.ckpt"
    assert not (tmp_path / "part" / "results" / "runs").exists() or not list((tmp_path / "part" / "results" /
                                                                              "runs").iterdir())
    import torch

    assert torch.load(saved, map_location="cpu", weights_only=False, mmap=True)["global_step"] == 4
    run(compose([*base, f"ckpt_path={saved}"], tmp_path / "resumed"))
    whole, resumed = record(tmp_path / "whole"), record(tmp_path / "resumed")
    assert resumed["steps"] == whole["steps"] == 12 and resumed["resumed_from"] == str(saved)
    assert resumed["val_curve_steps"] == whole["val_curve_steps"] == [6, 12]
    assert resumed["val_curve"] == whole["val_curve"] and resumed["metrics"] == whole["metrics"]


def test_compile_that_fails_falls_back_to_eager_and_says_so(compose, tmp_path, monkeypatch):
    import torch

    def broken(fn, **kwargs):
        def call(*args, **kw):
            raise RuntimeError("this loss cannot be compiled")
        return call

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.warns(UserWarning, match="torch.compile failed, eager instead"):
        run(compose([*GENERATED, "model=transformer", *FAST, "fast.compile=default", "save_predictions=false"],
                    tmp_path))
    rec = record(tmp_path)
    assert rec["status"] == "finished" and rec["steps"] == 12
    assert "this loss cannot be compiled" in rec["fast"]["fallback"] and rec["fast"]["compile"] == "default"


@pytest.mark.parametrize("override,message", [
    ("fast.compile=fastest", "fast.compile must be one of"),
    ("fast.log_every=0", "fast.log_every must be an int >= 1"),
    ("+fast.graphs=2", "fast: unknown key"),
    ("fast.compile=reduce-overhead", "makes CUDA graphs of its own"),
    # float16's GradScaler would unscale gradients the fast step never scaled (on a GPU: "Attempted unscale_ but
    # _scale is None" at the first step; a CPU runs bf16-mixed instead)
    ("trainer.precision=16-mixed", "trainer.precision=16-mixed with the fast path.*use trainer.precision=bf16-mixed"),
    # Lightning refused it once the data had loaded, with a traceback ("not supported for manual optimization")
    ("+trainer.accumulate_grad_batches=2", "trainer.accumulate_grad_batches=2 with the fast path"),
])
def test_bad_fast_options_stop_the_run_before_data(make_cfg, monkeypatch, override, message):
    from coda_exp.config_checks import ConfigError

    monkeypatch.setattr("coda_exp.pipeline.instantiate", lambda *a, **k: pytest.fail("data loaded before the check"))
    with pytest.raises(ConfigError, match=message):
        run(make_cfg("task=mlu", "model=transformer", "scale=fixture", *FAST, override))


@pytest.mark.slow  # torch.compile on a CPU: ~1-2 min of compiling
@pytest.mark.parametrize("model,compiled", [("transformer", True), ("coda_transformer", True)])
def test_compiled_fast_path_on_the_cpu(compose, tmp_path, model, compiled):
    """Both losses compile on a CPU: CoDA's numba kernels are torch.library custom ops (before, dynamo failed on
    them and the run went on eagerly, its record saying why)."""
    run(compose([*GENERATED, f"model={model}", *FAST, "fast.compile=default", "save_predictions=false"], tmp_path))
    rec = record(tmp_path)
    assert rec["status"] == "finished" and rec["steps"] == 12
    assert (rec["fast"]["fallback"] is None) == compiled


def test_gate_statistics_and_sparse_loss_logs_on_the_fast_path(compose, tmp_path):
    """GateStats asks for a real forward at its steps (hooks do not fire in a replayed graph); the training loss
    reaches the logger every fast.log_every steps, averaged on the device in between."""
    import csv

    run(compose([*GENERATED, "model=coda_transformer", "trainer=gpu_fast", "trainer.accelerator=cpu", "logger=csv",
                 "callbacks=gate_stats", "callbacks.gate_stats.every_n_steps=5", "fast.log_every=5",
                 "save_predictions=false"], tmp_path))
    rec = record(tmp_path)
    assert rec["gate_stats"] and all(v["steps"] == [5, 10] for v in rec["gate_stats"].values())
    (metrics,) = (tmp_path / "run" / "csv").rglob("metrics.csv")
    with open(metrics, newline="") as f:
        losses = [(int(r["step"]), float(r["train/loss"])) for r in csv.DictReader(f) if r.get("train/loss")]
    # Lightning re-sends the last value at each logging step (the fixture scale logs every step): new values
    # every 5 steps and at the last one (the logger counts from 0: steps 4, 9 and 11)
    fresh = [s for i, (s, v) in enumerate(losses) if i == 0 or v != losses[i - 1][1]]
    assert fresh == [4, 9, 11] and all(0 < v < 10 for _, v in losses)


def test_epochs_cut_by_a_batch_limit_go_on_along_the_static_batch_stream(compose, tmp_path, monkeypatch):
    """``trainer.limit_train_batches=3`` makes Lightning's epochs 3 batches of the endless static-batch stream, and
    each epoch starts a new pass of it: a pass starts where the run is (its trained batches), so 9 steps train on
    the stream's first 9 batches, as without the limit. Before, every pass started at the step the loader was made
    at (0), and every epoch trained on the same 3 batches."""
    from coda_exp.data.seq2seq import datamodule

    seen: list[tuple] = []
    encode = datamodule.MLUBatches.encode

    def noting(self, src, tgt, index):
        if self.repeat:  # a training batch
            seen.append(tuple(index))
        return encode(self, src, tgt, index)

    monkeypatch.setattr(datamodule.MLUBatches, "encode", noting)
    base = [*GENERATED, "model=transformer", *FAST, "save_predictions=false", "task.max_steps=9",
            "task.val_check_interval=3"]
    run(compose([*base, "trainer.limit_train_batches=3"], tmp_path / "limited"))
    limited, seen[:] = list(seen), []
    run(compose(base, tmp_path / "whole"))
    assert len(set(limited)) == len(limited) == 9 and limited == seen[:9]
