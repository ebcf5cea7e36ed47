"""scripts/bench_fast_path.py on the CPU: every lever a CPU can run gives a time, the float64 check passes.

``--compile-mode null``: the fast path's loss runs eagerly in the ``lightning-fast`` lever (``fast.compile=null``, as
trainer=gpu_fast has it), not torch.compile'd as the script's default does: compiling it on a CPU is a minute or more
with a cold inductor cache, and is tests/e2e/test_fast_path.py's ``test_compiled_fast_path_on_the_cpu`` (-m slow);
``make test`` compiles in tests/attention/test_compile.py and takes the compile fallback in test_fast_path.py."""

import json

import pytest


@pytest.mark.usefixtures("one_thread")
def test_the_levers_the_check_and_the_test_timing_on_a_cpu(load_script, tmp_path):
    bench = load_script("bench_fast_path")
    out = tmp_path / "bench.json"
    levers = ["eager", "static+fused", "static+fused+graph", "vmap", "lightning-fast"]
    bench.main(["--device", "cpu", "--scale", "fixture", "--models", "transformer", "--steps", "2", "--warmup", "1",
                "--vmap", "2", "--compile-mode", "null", "--levers", *levers, "--check", "--eval", "30",
                "--json", str(out), "--override=data.dir=null", "--override=data.num_train=400"])
    result = json.loads(out.read_text())
    times = result["ms_per_step"]["transformer"]
    assert set(times) == {"eager", "static+fused", "vmap", "lightning-fast"}  # no graph off CUDA
    assert all(t > 0 for t in times.values()) and not result["errors"]
    check = result["check"]["transformer"]
    assert check["ok"] and check["max_grad_rel_err"] < 1e-3 and check["graphs"] == 0
    assert result["eval_s"]["transformer"] > 0 and result["environment"]["torch"]
