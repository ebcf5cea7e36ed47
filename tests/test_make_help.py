"""``make help``: every target and its description in two columns, however long the target's name."""

from __future__ import annotations

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
