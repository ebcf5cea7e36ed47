"""scripts/check_cuda_coda.py on the CPU at tiny sizes: every kernel under every precision against float64, the
compiled module and model against eager, the JSON complete; its CUDA-graph part says it was skipped."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("parts", [
    "precisions",
    # ~7 s: three torch.compile runs; make test compiles CoDA modules in tests/attention/test_compile.py
    pytest.param("precisions,graphs,compile", marks=pytest.mark.slow)])
def test_precisions_and_compile_on_the_cpu(load_script, tmp_path, parts):
    out = tmp_path / "cuda.json"
    code = load_script("check_cuda_coda").main(["--device", "cpu", "--kernels", "auto,flash,torch", "--batch", "2",
                                                "--length", "12", "--parts", parts, "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0, [r for r in data["precisions"] + data["compile"] if not r["ok"]]
    assert [(r["kernel"], r["precision"]) for r in data["precisions"]] == [
        (k, p) for p in ("32-true", "bf16-mixed", "16-mixed", "bf16-true") for k in ("auto", "flash", "torch")]
    assert {r["out_dtype"] for r in data["precisions"] if r["precision"] == "bf16-true"} == {"torch.bfloat16"}
    assert all(r["ran"] == r["kernel"] for r in data["precisions"] if r["kernel"] != "auto")
    assert all("seconds" in r for r in data["precisions"])
    if "compile" in parts:
        assert [r["case"] for r in data["compile"]] == ["mha_flash_eval", "mha_flash_dropout", "coda_transformer"]
        assert data["graphs"] == [] and data["skipped"] == ["graphs: CUDA only"]
    else:
        assert data["compile"] == [] and data["graphs"] == []


def test_parts_run_in_the_order_given_and_a_bad_part_is_refused(load_script, tmp_path, capsys):
    import pytest

    script = load_script("check_cuda_coda")
    with pytest.raises(SystemExit):
        script.main(["--device", "cpu", "--parts", "graphs,precison"])
    assert "each part must be one of precisions, graphs, compile" in capsys.readouterr().err
    out = tmp_path / "c.json"
    assert script.main(["--device", "cpu", "--parts", "compile,precisions", "--kernels", "torch", "--precisions",
                        "32-true", "--batch", "1", "--length", "8", "--time-budget-s", "0", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["skipped"] == ["compile: time budget", "torch 32-true: time budget"]


def test_a_wrong_result_fails_the_run(load_script, tmp_path, monkeypatch):
    script = load_script("check_cuda_coda")
    monkeypatch.setitem(script.PRECISIONS, "32-true", (script.torch.float32, None, 0.0))  # nothing passes 0
    code = script.main(["--device", "cpu", "--kernels", "torch", "--precisions", "32-true", "--parts", "precisions",
                        "--batch", "1", "--length", "8", "--json", str(tmp_path / "c.json")])
    assert code == 1
    assert json.loads((tmp_path / "c.json").read_text())["precisions"][0]["ok"] is False
