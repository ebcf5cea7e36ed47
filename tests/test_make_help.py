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
