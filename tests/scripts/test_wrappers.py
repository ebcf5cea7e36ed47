"""scripts/<name>.py of the commands are thin wrappers: each runs its ``coda-exp`` command under its own name, and
works as a plain script of a checkout from any folder."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import ROOT

WRAPPERS = {"make_tables": "tables", "plot_learning_curves": "plot-curves", "plot_coda": "plot-coda",
            "plot_attconv": "plot-attconv", "estimate_runtime": "estimate", "fever_index": "fever-index",
            "fever_retrieve": "fever-retrieve", "make_yelp_split": "yelp-split", "make_mlu": "make-mlu",
            "average_checkpoints": "average-checkpoints", "gate_ablation_table": "compare"}


@pytest.mark.parametrize("script,command", sorted(WRAPPERS.items()))
def test_each_wrapper_runs_its_command(script, command, load_script, capsys, monkeypatch):
    from coda_exp import commands

    ran = []
    wrapper = load_script(script)
    monkeypatch.setattr(wrapper, "run_command",
                        lambda name, argv, prog=None: ran.append(name) or commands.run_command(name, argv, prog))
    with pytest.raises(SystemExit) as exit_:
        wrapper.main(["--help"])
    assert exit_.value.code == 0 and ran == [command]
    assert capsys.readouterr().out.startswith(f"usage: {script}.py ")


def test_a_wrapper_runs_as_a_plain_script_from_any_folder(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "tables"
    runs.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tables.py"), "--runs", str(runs), "--out",
                           str(out), "--tables", "table_6"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "table_6.md").is_file()
