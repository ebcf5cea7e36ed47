"""coda_exp.hydra_callbacks' sweep summary: a failed job's whole error, its further lines indented under it."""

from __future__ import annotations

from hydra.core.utils import JobReturn, JobStatus

from coda_exp.config_checks import ConfigError
from coda_exp.hydra_callbacks import SweepUserError, job_outcome, sweep_summary


def test_a_config_errors_keys_are_in_the_summary_not_only_its_first_line():
    """It used to show "invalid config values (fix the override or the YAML):" alone, without the key."""
    err = ConfigError("invalid config values (fix the override or the YAML):\n  task.epochs = -1: expected an int >= 1"
                      "\n  seed = -2: expected an int in [0, 4294967295] (2**32 - 1)")
    failed = JobReturn(overrides=["task.epochs=-1"], status=JobStatus.FAILED,
                       _return_value=SweepUserError(f"ConfigError: {err}"))
    assert sweep_summary([job_outcome(failed)]).splitlines()[1:] == [
        "  job #0 [task.epochs=-1]: exit status 1: ConfigError: invalid config values (fix the override or the YAML):",
        "      task.epochs = -1: expected an int >= 1",
        "      seed = -2: expected an int in [0, 4294967295] (2**32 - 1)"]


def test_a_long_error_is_cut():
    failed = JobReturn(overrides=[], status=JobStatus.FAILED, _return_value=ValueError("x" * 5000))
    assert job_outcome(failed)["error"].endswith("x ...") and len(job_outcome(failed)["error"]) < 2100
