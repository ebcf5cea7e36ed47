"""scripts/bench_gpu_coda.py on the CPU at tiny sizes: the float64 check passes, every row is timed (or names its
error), ratios and floor fractions are filled, the JSON is complete. Times are printed, never asserted."""

from __future__ import annotations

import json
import types

import numba
import torch


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
    """--train-steps: Transformer vs CoDA-Transformer steps at one shape (batch shrunk), float32 and bf16 autocast,
    one CoDA row per --train-kernels kernel, each running the kernel it names (auto its own choice)."""
    out = tmp_path / "gpu.json"
    code = load_script("bench_gpu_coda").main(["--device", "cpu", "--lengths", "16", "--tokens", "16", "--heads", "1",
                                               "--dim", "8", "--dtypes", "float32,bfloat16", "--causal", "0",
                                               "--reps", "1", "--train-steps", "mlu_tiny", "--train-shrink", "64",
                                               "--train-kernels", "auto,chunked", "--json", str(out)])
    assert code == 0
    steps = json.loads(out.read_text())["train_steps"]
    assert [(r["model"], r["kernel"], r["dtype"]) for r in steps] == [
        (model, kernel, f"torch.{dtype}") for dtype in ("float32", "bfloat16")
        for model, kernel in (("transformer", None), ("coda_transformer", "auto"), ("coda_transformer", "chunked"))]
    assert all("error" not in r and r["step_ms"] > 0 and r["batch"] == 3 for r in steps)
    assert steps[1]["kernels"] and steps[1]["over_transformer"] > 0
    assert steps[2]["kernels"] == ["chunked"] and steps[2]["over_transformer"] > 0


def _peer_run(load_script, tmp_path, monkeypatch, probe_ok: bool, keops_raises: bool):
    bench = load_script("bench_gpu_coda")
    monkeypatch.setattr(bench, "keops_probe", lambda *a, **k: {"ok": probe_ok, "rc": 0 if probe_ok else -11,
                                                                   "seconds": 0.1, "tail": "probe output"})
    real = bench.attention_fn

    def attention_fn(impl):
        if impl != "keops":
            return real(impl)

        def broken(*args, **kwargs):
            raise RuntimeError("KeOps code generation failed")
        return broken if keops_raises else real("flash")
    monkeypatch.setattr(bench, "attention_fn", attention_fn)
    out = tmp_path / "gpu.json"
    threads = (torch.get_num_threads(), numba.get_num_threads())
    try:
        code = bench.main(["--device", "cpu", "--lengths", "16", "--tokens", "16", "--heads", "1", "--dim", "8",
                           "--dtypes", "float32,bfloat16", "--causal", "0", "--reps", "1", "--impls",
                           "sdpa,flash,keops", "--threads", "1", "--json", str(out)])
    finally:  # --threads sets them for the whole process
        torch.set_num_threads(threads[0])
        numba.set_num_threads(threads[1])
    return code, json.loads(out.read_text())


def test_a_keops_probe_that_fails_skips_its_rows_not_the_run(load_script, tmp_path, monkeypatch):
    """KeOps' code generation once ended a process without a word: the child's failure is recorded, the rest runs."""
    code, data = _peer_run(load_script, tmp_path, monkeypatch, probe_ok=False, keops_raises=False)
    assert code == 0 and data["peers"]["keops"]["probe"]["rc"] == -11
    assert {r["impl"] for r in data["rows"]} == {"sdpa", "flash"}
    assert any("keops: probe failed" in s for s in data["skipped"])
    assert set(data["peers"]["keops"]["environment"]) >= {"pykeops", "keopscore", "pybind11", "pybind11_includes"}
    assert data["environment"]["threads_arg"] == 1 and "OMP_WAIT_POLICY" in data["environment"]


def test_keops_errors_are_recorded_in_the_json(load_script, tmp_path, monkeypatch):
    code, data = _peer_run(load_script, tmp_path, monkeypatch, probe_ok=True, keops_raises=True)
    assert code == 0 and "KeOps code generation failed" in data["peers"]["keops"]["check"][0]["error"]
    keops = [r for r in data["rows"] if r["impl"] == "keops"]
    assert len(keops) == 1 and keops[0]["dtype"] == "torch.float32" and "code generation failed" in keops[0]["error"]
    assert any("bfloat16 is not a keops dtype" in s for s in data["skipped"])


def test_a_peer_row_is_timed_within_its_budget(load_script, tmp_path, monkeypatch):
    """(A stand-in for KeOps: the flash op.) The first call, then reps cut to the budget; ratios filled."""
    code, data = _peer_run(load_script, tmp_path, monkeypatch, probe_ok=True, keops_raises=False)
    row = next(r for r in data["rows"] if r["impl"] == "keops")
    assert code == 0 and data["peers"]["keops"]["check"][0]["ok"]
    assert row["first_call_s"] >= 0 and row["fwd_ms"] > 0 and row["fwd_bwd_ms"] > 0 and row["reps"] == 1
    assert row["fwd_bwd_over_sdpa"] > 0


def test_each_row_names_what_autotune_chose_and_timed(load_script):
    """``autotuned``: per kernel the config its last call ran and every config's time (lists or single numbers, as
    Triton versions keep them); kernels not yet run are left out."""

    class Tuner:
        def __init__(self, best, timings):
            self.best_config, self.configs_timings = best, timings

    module = types.SimpleNamespace(_TUNED={"fwd": Tuner("BLOCK_M: 128, PF: 1", {"PF 0": [4.5, 4.4, 4.6], "PF 1": 3.25}),
                                           "dq": Tuner(None, {})})
    assert load_script("bench_gpu_coda").autotuned(module) == {
        "fwd": {"best": "BLOCK_M: 128, PF: 1", "timings_ms": {"PF 0": [4.5, 4.4, 4.6], "PF 1": [3.25]}}}
