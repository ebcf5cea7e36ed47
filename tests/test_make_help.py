"""``make help``: every target and its description in two columns, however long the target's name."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_the_target_column_fits_the_longest_name():
    out = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.splitlines() if line.strip()]
    names = [re.match(r"  (\S+)\s{2,}\S", line) for line in lines]
    assert all(names), [line for line, m in zip(lines, names) if not m]  # a name run into its text
    assert {"reproduce-table-6-gpu", "mlu-gate-ablation-10k"} <= {m.group(1) for m in names}
    assert len({m.end() for m in names}) == 1  # every description starts in one column


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_tables_says_which_runs_it_reads():
    """`make tables` read results/runs only, where the README said "picks up every finished run": a fixture run's
    record (outputs/fixture_results/) needs SCALE=fixture, which neither make help nor the README said."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.splitlines()]
    (line,) = [line for line in lines if re.match(r"  tables\s{2,}", line)]
    assert "SCALE=fixture: outputs/fixture_results/" in line
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (said,) = [line for line in readme.splitlines() if line.startswith("make tables ")]
    assert "every finished run" not in said and "SCALE=fixture: outputs/fixture_results" in said


#: exported to the commands (export X ?= ...): the environment every target's commands run in, not a target's own
COMMANDS_ENVIRONMENT = {"HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "WANDB_MODE", "PYTHONHASHSEED", "OMP_WAIT_POLICY"}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_help_names_each_targets_variables():
    """docs/running.md: "make help names each target's variables", where it never named RUN_ARGS for run, quickstart
    and reproduce-%, nor ABLATION_* and TABLE6_*; and the unknown-variable error left out VENV, which make takes."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    err = subprocess.run(["make", "-s", "--no-print-directory", "-n", "help", "NO_SUCH_VARIABLE=1"], cwd=ROOT,
                         capture_output=True, text=True, check=False, timeout=60, env=env).stderr
    listed = set(re.search(r"its variables: (.*?) \(make help", err).group(1).split())
    assert {"VENV", "RUN_ARGS", "SCALE", "TABLE6_ARGS"} <= listed and not {"PY", "STAMP", "SHELL"} & listed, listed
    out = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    lines = {m.group(1): m.group(2) for line in out.splitlines()
             if (m := re.match(r"  (\S+)\s{2,}(.*)", re.sub(r"\x1b\[[0-9;]*m", "", line)))}
    text = "\n".join(lines.values())
    assert not [v for v in listed - COMMANDS_ENVIRONMENT if not re.search(rf"\b{v}\b", text)]  # each one named
    for target, variables in {"run": ["RUN_ARGS"], "quickstart": ["RUN_ARGS"], "reproduce-%": ["SCALE", "RUN_ARGS"],
                              "mlu-gate-ablation": ["ABLATION_SCALE", "ABLATION_DIR", "ABLATION_ARGS", "RUN_ARGS"],
                              "mlu-gate-ablation-10k": ["ABLATION_SCALE", "ABLATION_DIR", "RUN_ARGS"],
                              "reproduce-table-6-gpu": ["SCALE", "TABLE6_BUDGET_S", "TABLE6_DIR", "TABLE6_OUTPUTS",
                                                        "TABLE6_ARGS"],
                              "mlu-studies-gpu": ["GPU_BUDGET_S", "GPU_PROBE_BUDGET_S", "MPS", "PROBES_DIR"],
                              "setup": ["VENV", "PYTHON", "TORCH_INDEX"], "help": ["VENV"]}.items():
        assert all(re.search(rf"\b{v}\b", lines[target]) for v in variables), (target, lines[target])
