"""End to end: fast_dev_run per task, a short run with its record, determinism, resuming, sweeps, errors."""

import gzip
import json
import shutil
import subprocess
import sys

import pytest
import torch
from hydra.errors import MissingConfigException

from coda_exp import offline, pipeline, results, table_render, tables
from coda_exp.fingerprint import GRID_FINGERPRINT, scale_label
from coda_exp.pipeline import run
from tests import FIXTURES, ROOT
from tests.e2e.helpers import train

TASKS = ["snli", "wikiqa", "mnli", "scitail", "dnli", "trecqa", "udc"]
# the other families, each with the model that serves it (softmax and CoDA variants alternate)
TASK_MODELS = [("mlu", "coda_transformer"), ("algolisp", "transformer"), ("iwslt15_envi", "coda_transformer"),
               ("imdb", "coda_transformer_classifier"), ("sst", "transformer_classifier"),
               ("quasart", "decaprop"), ("quasart", "decaprop_coda"), ("searchqa", "decaprop"),
               ("searchqa", "decaprop_coda")]


@pytest.mark.parametrize("task,model", [(t, "decompatt") for t in TASKS] + TASK_MODELS)
def test_fast_dev_run_per_task(make_cfg, task, model, tmp_path):
    cfg = make_cfg(f"task={task}", f"model={model}", "scale=fixture", "debug=fdr", "logger=none")
    run(cfg)
    assert not (tmp_path / "results" / "runs").exists()  # debug runs write no record


@pytest.mark.parametrize("debug", ["limit", "overfit"])
def test_debug_modes_run_on_the_fixtures_and_write_nothing(make_cfg, tmp_path, debug):
    extra = ["trainer.max_epochs=2"] if debug == "overfit" else []
    run(make_cfg("task=wikiqa", "scale=fixture", f"debug={debug}", "logger=none", *extra))
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.*"))


def test_short_run_writes_a_valid_record_and_predictions(make_cfg, tmp_path):
    cfg = make_cfg("task=wikiqa", "scale=fixture", "task.epochs=2", "seed=3")
    monitored = run(cfg)
    recs = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert len(recs) == 1
    rec = recs[0]
    assert rec["task"] == "wikiqa" and rec["model"] == "decompatt" and rec["seed"] == 3
    assert rec["scale"] == "fixture (task.epochs=2)" and rec["attention"]["name"] == "softmax"
    assert rec["attention_kernels"] == {"fit": [], "test": []}  # softmax: no CoDA kernel ran
    assert {"val/map", "val/mrr", "test/map", "test/mrr"} <= set(rec["metrics"])
    assert rec["metrics"]["val/map"] == pytest.approx(monitored)
    assert rec["epochs"] == 2 and rec["steps"] > 0 and rec["wall_time_s"] > 0
    assert rec["fingerprint"] == GRID_FINGERPRINT and rec["fingerprint_overrides"] == []
    assert rec["fixture_data"] is True  # tables call it a smoke test by its data, whatever the scale is named
    assert len(rec["val_curve"]) == 2 and max(rec["val_curve"]) == pytest.approx(monitored)  # the best one tested
    assert any("random" in w for w in rec["warnings"])
    with gzip.open(rec["predictions"], "rt") as f:
        preds = [json.loads(line) for line in f]
    assert len(preds) == rec["data"]["test_examples"]
    assert {"index", "group", "label", "score"} <= set(preds[0])
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert list((tmp_path / "run" / "csv").rglob("metrics.csv"))


def test_same_seed_same_result_on_cpu(tmp_path, compose):

    out = []
    for i in range(2):
        run(compose(["task=snli", "scale=fixture", "task.epochs=1", "logger=none", "save_record=false"],
                        tmp_path / str(i)))

        ckpt = torch.load(tmp_path / str(i) / "run" / "checkpoints" / "last.ckpt", weights_only=False)
        out.append(ckpt["state_dict"])
    assert out[0].keys() == out[1].keys()
    for k in out[0]:
        assert (out[0][k] == out[1][k]).all(), k


def test_resume_from_last_checkpoint(make_cfg, tmp_path):

    # the "best" checkpoint is pinned to epoch 0 (monitor epoch, mode min): last.ckpt must still follow the run
    best_first = ["callbacks.model_checkpoint.monitor=epoch", "callbacks.model_checkpoint.mode=min"]
    run(make_cfg("task=snli", "scale=fixture", "task.epochs=2", "logger=none", "save_record=false", *best_first))
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    state = torch.load(last, weights_only=False)
    assert state["epoch"] == 1  # the end of the second epoch, not the best (first) one
    steps_per_epoch = state["global_step"] // 2
    # resume with a larger budget: the configured patience (= task.epochs) applies, not the checkpoint's old one
    # a checkpoint written before ValidationHistory kept the steps: its validations' steps are unknown (None)
    (key,) = [k for k in state["callbacks"] if k.startswith("ValidationHistory")]
    assert state["callbacks"][key]["steps"] == [steps_per_epoch, 2 * steps_per_epoch]
    del state["callbacks"][key]["steps"]
    torch.save(state, last)
    run(make_cfg("task=snli", "scale=fixture", "task.epochs=4", "logger=none", f"ckpt_path={last}", *best_first))
    rec = results.load_records(tmp_path / "results" / "runs")[0]
    assert rec["epochs"] == 4 and rec["steps"] == 4 * steps_per_epoch  # continued, not restarted
    assert len(rec["val_curve"]) == 4 and rec["val_curve_metric"] == "val/acc"
    assert rec["val_curve_steps"] == [None, None, 3 * steps_per_epoch, 4 * steps_per_epoch]


def test_wandb_offline_run_is_finished(make_cfg, tmp_path):
    import wandb

    run(make_cfg("task=snli", "scale=fixture", "debug=fdr", "logger=wandb"))
    assert wandb.run is None  # finished, so a sweep's next job starts a fresh run
    assert list((tmp_path / "run").rglob("offline-run-*"))


@pytest.mark.parametrize("override,missing", [("task=nope", "task/nope"), ("model=nope", "model/nope")])
def test_unknown_task_or_model_lists_the_options(make_cfg, override, missing):
    with pytest.raises(MissingConfigException) as e:
        make_cfg(override)
    msg = str(e.value)
    assert missing in msg and "Available options" in msg and ("snli" in msg or "decompatt" in msg)


@pytest.mark.slow  # the sweep of `make test` is test_a_sweep_reports_every_failed_job_and_loses_none_of_the_others
def test_multirun_two_jobs_then_tables(tmp_path):
    proc = train(["-m", "task=wikiqa", "scale=fixture", "task.epochs=1", "seed=1,2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert sorted(r["seed"] for r in recs) == [1, 2]
    assert all(r["overrides"] and "task=wikiqa" in r["overrides"] for r in recs)
    assert {r["scale"] for r in recs} == {"fixture (task.epochs=1)"}  # a budget override is part of the scale
    spec = tables.load_table_spec(ROOT / "configs" / "tables" / "table_2.yaml")
    md = table_render.render_markdown(tables.build_table(spec, recs))
    assert "n=2" in md and "fixture" in md


@pytest.mark.parametrize("overrides,label", [
    (["model=transformer", "seed=1", "scale=cpu"], "cpu"),
    # how often a run validates decides which checkpoint is tested: part of the budget, named
    (["scale=cpu", "task.max_steps=10000", "task.val_check_interval=2500"],
     "cpu (task.max_steps=10000, task.val_check_interval=2500)"),
    (["+data.num_test=50", "debug=limit"], "cpu (data.num_test=50, debug=limit)"),
    (["task.max_steps=10000", "scale_name=cpu-10k"], "cpu"),  # the user's own label (cfg.scale_name) wins
])
def test_scale_label_names_budget_overrides(overrides, label):
    assert scale_label("cpu", overrides) == label


def test_a_sweep_reports_every_failed_job_and_loses_none_of_the_others(tmp_path):
    # folders whose files are all there (a missing one refuses the sweep before its first job, sweep_data) but
    # whose training file is broken: found only when the job reads it
    for name in ("missing1", "missing2"):
        shutil.copytree(FIXTURES / "wikiqa", tmp_path / name)
        (tmp_path / name / "WikiQA-train.tsv").write_text("not the header\n")
    proc = train(["-m", "task=wikiqa", "scale=fixture", "task.epochs=1",
                  f"data.dir={tmp_path}/missing1,{FIXTURES}/wikiqa,{tmp_path}/missing2"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]  # every failure a user's mistake (a crash: 1)
    recs = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert len(recs) == 1 and recs[0]["task"] == "wikiqa"
    # the end of the sweep lists both failed jobs, with their overrides and exit status
    summary = proc.stderr[proc.stderr.index("sweep: 3 job(s), 2 failed"):]
    jobs = [line for line in summary.splitlines() if line.startswith("  job #")]
    assert len(jobs) == 2
    for line, num, missing in zip(jobs, (0, 2), ("missing1", "missing2")):
        assert line.startswith(f"  job #{num} [task=wikiqa scale=fixture task.epochs=1 data.dir={tmp_path}/{missing} ")
        assert "]: exit status 2: DataError:" in line  # a user's mistake: status 2, a crash's is 1
    # the summary is the sweep's report: not Hydra's of the first failure before it, nor its HYDRA_FULL_ERROR advice
    assert proc.stderr.count("WikiQA-train.tsv") == 2 and "Error executing job" not in proc.stderr
    # each failed job's own train.log ends with its error (the files it expected), after "Seed set to": the message
    # alone, no traceback (a DataError is a user's mistake); Hydra's final report is that one message too
    logs = sorted((tmp_path / "outputs" / "multiruns").glob("*/[02]-wikiqa-*/train.log"))
    assert len(logs) == 2
    for path in logs:
        text = path.read_text()
        assert "WikiQA-train.tsv" in text and "Traceback" not in text, text[-2000:]


def test_coda_run_and_figure_2(make_cfg, tmp_path):
    run(make_cfg("task=wikiqa", "model=decompatt_coda", "scale=fixture", "task.epochs=1", "logger=none",
                 "model.attention.center_n=true"))
    rec = results.load_records(tmp_path / "results" / "runs", strict=True)[0]
    assert rec["model"] == "decompatt_coda" and rec["attention"]["name"] == "coda"
    assert rec["attention"]["center_n"] is True and rec["attention"]["gate_scale"] == 2.0
    # centring needs the materialised E and N: the numba L1 kernel ran, not the fused one (coda_exp.attention.dispatch)
    assert rec["attention_kernels"] == {"fit": ["numba"], "test": ["numba"]}
    from coda_exp.tools import plot_coda

    out = tmp_path / "fig2.png"
    assert plot_coda.main(["--record", str(next((tmp_path / "results" / "runs").glob("*.json"))),
                           "--out", str(out), "--batches", "2"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("task,model", [("mlu", "coda_transformer"), ("iwslt15_envi", "transformer"),
                                        ("algolisp", "coda_transformer")])
def test_seq2seq_run_records_sequence_metrics(make_cfg, tmp_path, monkeypatch, task, model):
    from coda_exp.metrics.bleu import t2t_bleu
    from coda_exp.tasks import Seq2SeqTask

    decoded, generate = [], Seq2SeqTask.generate
    monkeypatch.setattr(Seq2SeqTask, "generate", lambda self, batch, decoding: decoded.append(
        (str(self.trainer.state.fn.value), decoding["strategy"])) or generate(self, batch, decoding))
    # an untrained model rarely ends its output: AlgoLisp's 200-token cap made three evaluations decode 200 steps
    short = ["task.module.decoding.max_len_b=40"] if task == "algolisp" else []
    cfg = make_cfg(f"task={task}", f"model={model}", "scale=fixture", "logger=none", "task.max_steps=4",
                   "task.val_check_interval=2", *short)
    monitor = cfg.task.monitor
    run(cfg)
    rec = results.load_records(tmp_path / "results" / "runs", strict=True)[0]
    assert {"test/acc_seq", "test/acc_seq_tf", "test/acc_tok_tf", "val/acc_seq"} <= set(rec["metrics"])
    assert rec["val_curve_steps"] == [2, 4] and len(rec["val_curve"]) == 2 and rec["val_curve_metric"] == monitor
    assert "gate_stats" not in rec  # callbacks=gate_stats is off by default
    assert rec["attention"]["name"] == ("coda" if model.startswith("coda") else "softmax")
    with gzip.open(rec["predictions"], "rt") as f:
        rows = [json.loads(line) for line in f]
    assert all({"index", "hypothesis", "reference", "exact"} <= set(r) for r in rows)
    # the saved per-example outcomes reproduce the recorded exact-match accuracy (for paired tests)
    assert sum(r["exact"] for r in rows) / len(rows) == pytest.approx(rec["metrics"]["test/acc_seq"])
    if task == "iwslt15_envi":  # BLEU against the raw references, and checkpoint averaging before the test
        assert {"test/bleu", "test/bleu_tok", "test/bleu_t2t", "val/bleu_t2t"} <= set(rec["metrics"])
        assert rec["checkpoints_averaged"] >= 1 and rec["best_checkpoint"].endswith("averaged.ckpt")
        # model selection decodes greedily; the final validation of the tested checkpoint decodes as the test
        assert {s for fn, s in decoded if fn == "fit"} == {"greedy"}
        assert {s for fn, s in decoded if fn in ("validate", "test")} == {"beam"}
        # the saved references are the raw tst2013.vi lines (no <unk>): BLEU recomputes from the predictions
        lines = (FIXTURES / task / "tst2013.vi").read_text(encoding="utf-8").splitlines()
        assert [r["reference"] for r in rows] == lines and "<unk>" not in lines[0]
        assert not rows[0]["exact"]  # its reference holds characters the BPE never saw (<unk>): never an exact match
        bleu = t2t_bleu([r["hypothesis"] for r in rows], [r["reference"] for r in rows])  # the paper's metric
        assert bleu == pytest.approx(rec["metrics"]["test/bleu_t2t"])
    if task == "algolisp":  # per-example execution outcomes, for Table 7's paired test
        assert sum(r["exec"] for r in rows) / len(rows) == pytest.approx(rec["metrics"]["test/acc_exec"])
        assert rows[0]["reference"].startswith("( ")


@pytest.mark.parametrize("model", ["coda_transformer", "transformer"])
def test_gate_stats_reach_the_logs_and_the_record(make_cfg, tmp_path, model):
    import csv

    overrides = ["task=mlu", f"model={model}", "scale=fixture", "task.max_steps=4", "task.val_check_interval=2",
                 "callbacks=gate_stats", "callbacks.gate_stats.every_n_steps=2", "save_predictions=false"]
    if model == "transformer":  # softmax: one warning, nothing measured, an empty series in the record
        with pytest.warns(UserWarning, match="no CoDA attention layer"):
            run(make_cfg(*overrides))
    else:
        run(make_cfg(*overrides))
    rec = results.load_records(tmp_path / "results" / "runs", strict=True)[0]
    assert rec["fingerprint"] == GRID_FINGERPRINT  # measuring is no other configuration: pooled in Table 6
    if model == "transformer":
        assert rec["gate_stats"] == {}
        return
    layers = [f"encoder.layers.{i}.self_attn" for i in range(2)] + [
        f"decoder_layers.{i}.{kind}" for i in range(2) for kind in ("self_attn", "cross_attn")]
    assert sorted(rec["gate_stats"]) == sorted(layers)
    for series in rec["gate_stats"].values():
        assert series["steps"] == [2, 4]
        assert all(0.0 <= v <= 1.0 for v in series["mean"] + series["frac_lt_0.01"])
    with open(next((tmp_path / "run" / "csv").rglob("metrics.csv")), newline="") as f:
        rows = list(csv.DictReader(f))
    logged = [(int(r["step"]), float(r["gate/encoder.layers.0.self_attn/mean"])) for r in rows
              if r.get("gate/encoder.layers.0.self_attn/mean")]
    # once per measurement, at the logger step of the measured batch's training loss (Lightning's: step count - 1)
    assert [s for s, _ in logged] == [1, 3]
    assert [v for _, v in logged] == pytest.approx(rec["gate_stats"]["encoder.layers.0.self_attn"]["mean"])
    assert any(r.get("gate/decoder_layers.1.cross_attn/frac_lt_0.01") for r in rows)


def test_average_last_gives_every_rank_rank_zeros_checkpoint(make_cfg, tmp_path):
    """Rank 0 averages and broadcasts (path, count); another rank writes nothing and returns the broadcast."""
    import types
    from pathlib import Path

    from coda_exp import checkpoint_avg

    cfg = make_cfg("task=iwslt15_envi", "task.average_last=2")
    folder = tmp_path / "run" / "checkpoints" / "periodic"
    folder.mkdir(parents=True)
    for step in (2, 4, 6):
        torch.save({"state_dict": {"w": torch.full((2,), float(step))}, "global_step": step}, folder / f"s{step}.ckpt")
    sent = []

    def trainer(rank_zero: bool, received=None):
        def broadcast(obj, src=0):
            sent.append(obj)
            return obj if rank_zero else received
        return types.SimpleNamespace(is_global_zero=rank_zero, strategy=types.SimpleNamespace(broadcast=broadcast))

    path, n = checkpoint_avg.average_last(cfg, trainer(True))
    assert n == 2 and path.endswith("averaged.ckpt") and sent == [(path, 2)]
    assert torch.load(path, weights_only=False)["state_dict"]["w"].tolist() == [5.0, 5.0]
    Path(path).unlink()
    assert checkpoint_avg.average_last(cfg, trainer(False, received=(path, 2))) == (path, 2)
    assert not Path(path).exists() and sent[-1] is None  # only rank 0 writes
    assert checkpoint_avg.average_last(make_cfg("task=iwslt15_envi", "task.average_last=0"), trainer(True)) is None


def test_periodic_checkpoints_are_spaced_in_optimizer_steps_under_gradient_accumulation(make_cfg, tmp_path):
    """docs/transformer.md: task.average_last keeps one checkpoint every task.val_check_interval optimizer steps
    (T2T's spacing), whatever trainer.accumulate_grad_batches; validation counts the interval in batches."""
    from coda_exp.checkpoint_avg import global_step

    run(make_cfg("task=iwslt15_envi", "model=transformer", "scale=fixture", "logger=none", "save_predictions=false",
                 "task.max_steps=6", "task.val_check_interval=2", "task.average_last=10",
                 "+trainer.accumulate_grad_batches=2"))
    (rec,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert rec["val_curve_steps"] == [1, 2, 3, 4, 5, 6] and rec["checkpoints_averaged"] == 3  # 2 batches: 1 step
    periodic = sorted((tmp_path / "run" / "checkpoints" / "periodic").glob("*.ckpt"))
    assert [global_step(p) for p in periodic] == [2, 4, 6]

@pytest.mark.slow
def test_bench_attention_runs_under_both_wait_policies(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_attention.py"), "--quick", "--reps", "1",
                           "--device", "cpu", "--omp-policy", "both", "--json", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["git_commit"] and record["command"].startswith("python scripts/bench_attention.py")
    rows = record["rows"]
    assert {r["omp_wait_policy"] for r in rows} == {"PASSIVE", "ACTIVE"}
    assert all(r["ms"] > 0 and r["peak_mb"] > 0 for r in rows)
    base = [r for r in rows if r["impl"] in ("sdpa", "softmax")]
    assert len(base) == 4 and all(r["time_ratio"] == 1.0 for r in base)
    assert "PASSIVE   ACTIVE" in proc.stdout


def test_official_files_in_data_task_are_read_without_data_dir(make_cfg, tmp_path):
    """README: "put the official files in data/<task>/" — a plain run (data.dir null) reads them there."""
    import shutil

    from omegaconf import OmegaConf

    shutil.copytree(FIXTURES / "snli", tmp_path / "data" / "snli")
    run(make_cfg("task=snli", "task.epochs=1", "logger=none"))
    resolved = OmegaConf.load(tmp_path / "run" / "config_resolved.yaml")
    assert resolved.data.dir == str(tmp_path / "data" / "snli")
    (rec,) = results.load_records(tmp_path / "results" / "runs")
    assert rec["data"]["train_examples"] > 0


def test_record_names_the_commit_the_run_started_at(make_cfg, tmp_path, monkeypatch):
    """A commit made while a run trains must not be credited with its record: the commit is read at the start."""
    def commit(*args, **kwargs):  # "later" once training has written a checkpoint
        return "later" if any((tmp_path / "run").rglob("*.ckpt")) else "start"

    monkeypatch.setattr(results, "git_commit", commit)
    run(make_cfg("task=wikiqa", "scale=fixture", "task.epochs=1", "logger=none"))
    assert results.load_records(tmp_path / "results" / "runs", strict=True)[0]["git_commit"] == "start"


def test_model_keys_the_model_does_not_take_stop_the_run_before_data(make_cfg):
    """imdb's T2T preset sets Transformer sizes; AttConv takes none of them: one error naming the keys and the way
    out, raised before any data loads."""
    with pytest.raises(ValueError, match=r"model\.d_model.*not parameters of coda_exp\.models\.AttConvLight.*"
                                         r"preset=none"):
        run(make_cfg("task=imdb", "model=attconv_light", "scale=fixture", "data.dir=/nonexistent"))
    assert pipeline.unknown_model_keys(make_cfg("task=imdb", "model=attconv_light", "preset=none")) == []


@pytest.mark.parametrize("task,overrides", [
    # the best checkpoint pinned to epoch 0 (monitor epoch, mode min): the final weights are another checkpoint
    ("wikiqa", ["task.epochs=2", "callbacks.model_checkpoint.monitor=epoch", "callbacks.model_checkpoint.mode=min"]),
    ("iwslt15_envi", ["model=transformer"]),  # T2T's averaged checkpoint is what is tested
])
def test_the_record_tests_the_checkpoint_it_names(make_cfg, tmp_path, task, overrides):
    """The record's test metrics are those of its ``best_checkpoint`` (``averaged.ckpt`` for MT), tested anew; a
    pipeline that tested the final weights while naming the best one would fail here (issue 20)."""
    import pytorch_lightning as pl
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    run(make_cfg(f"task={task}", "scale=fixture", "logger=none", "save_predictions=false", *overrides))
    (rec,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    best = rec["best_checkpoint"]
    if task == "wikiqa":
        assert best.endswith(".ckpt") and "epoch000" in best
    else:
        assert best.endswith("averaged.ckpt") and rec["checkpoints_averaged"] >= 1
    cfg = OmegaConf.load(tmp_path / "run" / "config_resolved.yaml")
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    module = pipeline.build_task(cfg, pipeline.build_model(cfg, datamodule), datamodule)
    module.prepare_final_evaluation()
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    (tested,) = trainer.test(module, datamodule=datamodule, ckpt_path=best, verbose=False)
    for key, value in tested.items():
        assert rec["metrics"][key] == pytest.approx(float(value), abs=1e-6), key


def test_a_checkpoint_alone_rebuilds_its_model(make_cfg, tmp_path):
    """The run's resolved config rides in every checkpoint: a .ckpt moved away from its run folder still loads
    (offline.load_trained), and an older checkpoint without it still reads its folder's config_resolved.yaml."""
    import shutil

    from coda_exp.tasks.base import CHECKPOINT_CONFIG

    run(make_cfg("task=wikiqa", "scale=fixture", "task.epochs=1", "logger=none", "save_predictions=false"))
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    alone = shutil.copy(last, tmp_path / "alone.ckpt")
    cfg, _, net = offline.load_trained(alone)
    assert cfg.task.name == "wikiqa" and cfg.model.name == "decompatt"
    state = torch.load(last, weights_only=False)
    for key, value in net.state_dict().items():
        assert torch.equal(value, state["state_dict"][f"model.{key}"]), key
    del state[CHECKPOINT_CONFIG]
    torch.save(state, last)
    assert offline.load_trained(last)[0].task.name == "wikiqa"
    torch.save(state, tmp_path / "alone.ckpt")
    with pytest.raises(FileNotFoundError, match="no run config in"):
        offline.load_trained(tmp_path / "alone.ckpt")

