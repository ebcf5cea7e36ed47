"""scripts/bench_gpu_coda.py on the CPU at tiny sizes: the float64 check passes, every row is timed (or names its
error), ratios and floor fractions are filled, the JSON is complete. Times are printed, never asserted."""

from __future__ import annotations

import json


def test_check_then_rows_into_the_json(load_script, tmp_path):
    out = tmp_path / "gpu.json"
    code = load_script("bench_gpu_coda").main(["--device", "cpu", "--lengths", "16,32", "--tokens", "32", "--heads",
                                               "2", "--dim", "8", "--dtypes", "float32", "--reps", "1",
                                               "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["environment"]["device"] == "cpu" and data["environment"]["commit"]
    assert [c["ok"] for c in data["check"]] == [True]
    assert len(data["rows"]) == 2 * 2 * 3  # lengths x causal x (sdpa, flash, chunked)
    assert all("error" not in r and r["fwd_ms"] > 0 and r["fwd_bwd_ms"] > 0 for r in data["rows"])
    assert all(r["fwd_bwd_over_sdpa"] > 0 and r["fwd_floor_fraction"] > 0 for r in data["rows"] if r["impl"] != "sdpa")
    assert {r["B"] for r in data["rows"] if r["L"] == 16} == {2}  # B x L fixed


def test_training_steps_side_by_side(load_script, tmp_path):
    """--train-steps: Transformer vs CoDA-Transformer steps at one shape (batch shrunk), float32 and bf16 autocast."""
    out = tmp_path / "gpu.json"
    code = load_script("bench_gpu_coda").main(["--device", "cpu", "--lengths", "16", "--tokens", "16", "--heads", "1",
                                               "--dim", "8", "--dtypes", "float32,bfloat16", "--causal", "0",
                                               "--reps", "1", "--train-steps", "mlu_tiny", "--train-shrink", "64",
                                               "--json", str(out)])
    assert code == 0
    steps = json.loads(out.read_text())["train_steps"]
    assert [(r["model"], r["dtype"]) for r in steps] == [
        ("transformer", "torch.float32"), ("coda_transformer", "torch.float32"),
        ("transformer", "torch.bfloat16"), ("coda_transformer", "torch.bfloat16")]
    assert all("error" not in r and r["step_ms"] > 0 and r["batch"] == 3 for r in steps)
    assert steps[1]["kernels"] and steps[1]["over_transformer"] > 0
