"""``threads=N`` pins torch's and numba's CPU threads, whatever the environment says, and the record says so."""

import json

import pytest
import torch

from coda_exp import results
from coda_exp.threads import pin_threads, thread_counts


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    pin_threads(before)


def test_pin_sets_torch_and_numba_and_survives_a_numba_kernel(restore_threads):
    pytest.importorskip("numba")
    from coda_exp.attention.kernels.l1 import numba_l1

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


def test_two_ambient_thread_settings_give_the_same_record(compose, tmp_path, restore_threads):
    """The main job's promise: with threads= set, the record does not depend on the thread count the process
    found (a shell's OMP_NUM_THREADS, a launcher's setting): here 2 and 1 threads before the run."""
    from coda_exp.pipeline import run

    records = []
    for ambient in (2, 1):
        torch.set_num_threads(ambient)
        folder = tmp_path / f"ambient{ambient}"
        # 4 steps, 2 validations: the thread count a record depends on does not depend on the budget
        run(compose(["task=mlu", "model=coda_transformer", "scale=fixture", "threads=1", "logger=none",
                     "save_predictions=false", "task.max_steps=4", "task.val_check_interval=2"], folder))
        (rec,) = results.load_records(folder / "results" / "runs", strict=True)
        records.append(rec)
    one, two = records
    for rec in records:
        assert rec["threads"]["configured"] == 1 and rec["threads"]["torch"] == 1
        assert rec["threads"].get("numba", 1) == 1
        assert rec["device"].endswith("1 threads)")
        env = rec["environment"]  # what else a bit-for-bit comparison needs: the CPU and the versions
        assert env["torch"] == torch.__version__ and env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
        assert env["cpu"] and env["python"].count(".") == 2 and "pytorch-lightning" in env
    assert json.dumps(one["metrics"], sort_keys=True) == json.dumps(two["metrics"], sort_keys=True)
    assert one["val_curve"] == two["val_curve"] and one["fingerprint"] == two["fingerprint"]


def test_more_threads_than_cores_warns_once(restore_threads, caplog, monkeypatch):
    """threads=999 on 2 cores ran 6x slower without a word."""
    from coda_exp import threads

    monkeypatch.setattr(threads, "available_cores", lambda: 1)
    monkeypatch.setattr(threads, "_warned", set())
    with caplog.at_level("WARNING", logger="coda_exp.threads"):
        pin_threads(1)
        assert not caplog.records
        pin_threads(3)
        pin_threads(3)  # a sweep's next job: not said again
    (warning,) = caplog.records
    assert "threads=3 on a machine where this process has 1 cores" in warning.getMessage()
    assert "slower than threads=1" in warning.getMessage()
