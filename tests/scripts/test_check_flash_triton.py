"""scripts/check_flash_triton.py under the Triton interpreter: a tiny case passes in float32 and float64 (every
feature: masks, causal, dropout, unshared N) with the split and the fused backward, a wrong kernel fails the
check, and the summary names both."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from coda_exp.attention.kernels import flash_triton as ft

TINY = ("tiny", 1, 2, 9, 11, 5, 3, 4, "tanh", "sigmoid", True, 0.2, True, True, False)


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


CENTRED = (*TINY[:-1], False, {"center_e": True, "center_n": True, "center_over": "slice"})


@pytest.mark.parametrize("case,dtype", [(TINY, "float32"), (TINY, "float64"), (CENTRED, "float64")])
def test_a_tiny_case_passes(load_script, case, dtype):
    result = load_script("check_flash_triton").run_case(case, dtype, "cpu")
    assert result["ok"], result
    assert [c["backward"] for c in result["configs"]] == ["split", "fused"]  # both backwards, the one config
    assert all(set(c["errors"]) == {"out", "q", "k", "v", "nq", "nk"} for c in result["configs"])


def test_a_wrong_backward_fails(load_script, monkeypatch):
    backward = ft.backward
    monkeypatch.setattr(ft, "backward", lambda *a: tuple(None if g is None else g * 1.01 for g in backward(*a)))
    result = load_script("check_flash_triton").run_case(TINY, "float64", "cpu", ("fused",))
    assert not result["ok"] and [c["backward"] for c in result["configs"]] == ["fused"]
    assert result["configs"][0]["errors"]["out"] < 1e-12 < result["configs"][0]["errors"]["q"]


def test_a_config_the_gpu_cannot_hold_is_skipped_not_failed(load_script, monkeypatch):
    """Triton's OutOfResources (float64 at 128 x 64 tiles needs more shared memory than an H100 has: autotune skips
    such a config) is listed as skipped; with no config left the case fails; any other error is raised."""
    script = load_script("check_flash_triton")
    OutOfResources = type("OutOfResources", (Exception,), {})  # matched by name, as Triton's is
    forward = ft.forward
    monkeypatch.setattr(ft, "backward", lambda *a: (_ for _ in ()).throw(OutOfResources("shared memory 311296")))
    result = script.run_case(TINY, "float64", "cpu", ("split",))
    assert not result["ok"] and "does not fit this GPU" in result["configs"][0]["skipped"]
    monkeypatch.setattr(ft, "forward", lambda *a: (_ for _ in ()).throw(RuntimeError("a real bug")))
    with pytest.raises(RuntimeError, match="a real bug"):
        script.run_case(TINY, "float64", "cpu", ("split",))
    monkeypatch.setattr(ft, "forward", forward)
    assert script._too_big(OutOfResources("x")).startswith("does not fit") and script._too_big(ValueError()) is None


def test_a_spent_time_budget_ends_the_workers(load_script, tmp_path):
    """--time-budget-s: the cases not done are not waited for, the spawned workers are ended (a timeout that kills
    the parent alone left them compiling on the GPU machine), the JSON says incomplete, the exit status is 1."""
    import json
    import multiprocessing

    out = tmp_path / "check.json"
    before = set(multiprocessing.active_children())
    code = load_script("check_flash_triton").main(["--device", "cpu", "--quick", "--jobs", "2", "--dtypes", "float32",
                                                   "--time-budget-s", "0.01", "--json", str(out)])
    assert code == 1 and set(multiprocessing.active_children()) <= before
    summary = json.loads(out.read_text())
    assert summary["complete"] is False and summary["cases"] == 0
