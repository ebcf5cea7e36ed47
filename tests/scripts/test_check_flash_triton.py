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
