"""DDP on the CPU (two gloo processes): every test example once, and every metric that of one process."""

import gzip
import json
import os

import pytest
import torch

from coda_exp import results
from coda_exp.metrics import ranking_scores
from tests import ROOT
from tests.e2e.helpers import train


@pytest.mark.parametrize("task,model,extra", [  # one two-process run in `make test`, the others with -m slow
    pytest.param("wikiqa", "decompatt_coda", ["task.epochs=1"], marks=pytest.mark.slow),
    # 23 examples: the sampler pads the second shard with a repeat of the first example
    ("snli", "decompatt", ["task.epochs=1", "data.max_eval_examples=23"]),
    pytest.param("mlu", "transformer", ["task.max_steps=4", "task.val_check_interval=2"], marks=pytest.mark.slow),
    # span (the loss over answerable examples) and evidence: odd splits, so the sampler pads a shard
    pytest.param("quasart", "decaprop", ["task.epochs=1", "data.max_eval_examples=7"], marks=pytest.mark.slow),
    pytest.param("fever", "attconv_light", ["task.epochs=1", "data.max_eval_examples=11"], marks=pytest.mark.slow),
])
def test_ddp_on_cpu_tests_every_example_once(tmp_path, task, model, extra):
    """trainer=ddp with two CPU processes (gloo): the record's predictions hold every test example exactly once
    (each process tested a shard) and the sequence metrics are those of the whole test set. Every metric equals
    a one-process evaluation of the same checkpoint: the losses and token accuracies too, which averaged the two
    processes' means with equal weight (whatever each held) and counted the sampler's repeats."""
    from coda_exp.evaluate import eval_main

    proc = train([f"task={task}", f"model={model}", "scale=fixture", "trainer=ddp", "trainer.accelerator=cpu",
                   "trainer.devices=2", *extra], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    one = tmp_path / "one"
    assert eval_main([f"ckpt_path={rec['best_checkpoint']}", f"paths.results_dir={one}/results", "logger=none",
                      f"paths.log_dir={one}/outputs", f"paths.cache_dir={tmp_path}/cache"]) == 0
    (alone,) = results.load_records(one / "results" / "runs", strict=True)
    assert set(alone["metrics"]) == set(rec["metrics"]) and {"val/loss", "test/loss"} <= set(rec["metrics"])
    for name, value in rec["metrics"].items():
        assert alone["metrics"][name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    with gzip.open(ROOT / rec["predictions"] if not os.path.isabs(rec["predictions"]) else rec["predictions"],
                   "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert sorted(r["index"] for r in rows) == list(range(rec["data"]["test_examples"]))
    if task == "mlu":
        assert rec["metrics"]["test/acc_seq"] == pytest.approx(sum(r["exact"] for r in rows) / len(rows))
    if task == "wikiqa":  # each rank scored whole questions: MAP/MRR are those of the gathered predictions
        out = ranking_scores(*(torch.tensor([r[k] for r in rows]) for k in ("score", "label", "group")))
        assert (rec["metrics"]["test/map"], rec["metrics"]["test/mrr"]) == pytest.approx((out["map"], out["mrr"]))
    if task == "snli":  # accuracy over every example once, not over the padded shards
        correct = sum(r["prediction"] == r["label"] for r in rows) / len(rows)
        assert rec["metrics"]["test/acc"] == pytest.approx(correct)
