"""CoDA trains under Lightning's 16-bit precisions on the CPU (issue 22, item 3): bf16-mixed and bf16-true fixture
runs of a CoDA Transformer and DecompAtt + CoDA finish with finite metrics, on the CPU's own kernel (fused, in
float32: coda_exp/attention/precision.py). Before, cdist (no bfloat16 kernel) or numba (no bfloat16) stopped them."""

import math

import pytest

from coda_exp import results
from coda_exp.pipeline import run


@pytest.mark.parametrize("precision,task", [("bf16-true", ["task=mlu", "model=coda_transformer", "task.max_steps=4",
                                                           "task.val_check_interval=2"]),
                                            ("bf16-mixed", ["task=wikiqa", "model=decompatt_coda", "task.epochs=1"])])
def test_coda_trains_in_bfloat16(compose, tmp_path, precision, task):
    run(compose([*task, "scale=fixture", f"trainer.precision={precision}", "logger=none", "save_predictions=false"],
                tmp_path))
    (rec,) = results.load_records(tmp_path / "results" / "runs", strict=True)
    assert rec["status"] == "finished" and rec["attention_kernels"] == {"fit": ["fused"], "test": ["fused"]}
    assert all(math.isfinite(v) for v in rec["metrics"].values())
    assert f"trainer.precision={precision}" in rec["fingerprint_overrides"]  # not pooled with float32 runs
