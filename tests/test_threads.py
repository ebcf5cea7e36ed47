"""``threads=N`` pins torch's and numba's CPU threads, whatever the environment says, and the record says so."""

import json
import os
import subprocess
import sys

import pytest
import torch

from coda_exp import results
from coda_exp.threads import pin_threads, thread_counts
from tests import ROOT


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    pin_threads(before)


def test_pin_sets_torch_and_numba_and_survives_a_numba_kernel(restore_threads):
    pytest.importorskip("numba")
    from coda_exp.attention.l1 import numba_l1

    counts = pin_threads(1)
    assert counts == {"torch": 1, "numba": 1}
    x = torch.randn(2, 4, 5, 8, dtype=torch.float64)
    numba_l1(x, x)  # a parallel numba kernel on the shared OpenMP runtime
    assert thread_counts() == {"torch": 1, "numba": 1}


@pytest.mark.parametrize("bad", [0, -2, 1.5, "two", True])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        pin_threads(bad)


def test_none_leaves_the_counts_as_found(restore_threads):
    torch.set_num_threads(1)
    assert pin_threads(None)["torch"] == 1


def _mlu_run(tmp_path, name: str, omp: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "CODA_KERNEL")}
    env.update(OMP_NUM_THREADS=omp, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    out = tmp_path / name
    cmd = [sys.executable, str(ROOT / "train.py"), "task=mlu", "model=coda_transformer", "scale=fixture",
           "threads=1", "logger=none", f"paths.results_dir={out}/results", f"paths.log_dir={out}/outputs",
           f"paths.cache_dir={out}/cache", "save_predictions=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = results.load_records(out / "results" / "runs", strict=True)
    return record


def test_two_ambient_thread_settings_give_the_same_record(tmp_path):
    """The main job's promise: the record does not depend on the shell's OMP_NUM_THREADS once threads= is set."""
    one, two = _mlu_run(tmp_path, "omp1", "1"), _mlu_run(tmp_path, "omp2", "2")
    for rec in (one, two):
        assert rec["threads"]["configured"] == 1 and rec["threads"]["torch"] == 1
        assert rec["threads"].get("numba", 1) == 1
        assert rec["device"].endswith("1 threads)")
    assert json.dumps(one["metrics"], sort_keys=True) == json.dumps(two["metrics"], sort_keys=True)
    assert one["val_curve"] == two["val_curve"] and one["fingerprint"] == two["fingerprint"]
