"""The Makefile's variables: ``make tables`` takes RUNS, OUT, TABLES and PREDICTIONS (it used to ignore them and
rewrite the committed results/tables from results/runs); a variable the Makefile does not know is an error, not
ignored without a word."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make here")


def _user_env() -> dict:
    """The environment of make as a user types it, not of a sub-make of ``make test`` (whose MAKELEVEL skips the
    variable check)."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "-o", ".venv/.installed", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=120, env=_user_env())


def test_make_tables_passes_its_variables_on():
    assert make("-n", "tables").stdout.split()[1:] == ["scripts/make_tables.py", "--runs", "results/runs"]
    out = make("-n", "tables", "RUNS=/tmp/r", "OUT=/tmp/t", "TABLES=table_2 table_6", "PREDICTIONS=/tmp/p").stdout
    assert out.split()[1:] == ["scripts/make_tables.py", "--runs", "/tmp/r", "--out", "/tmp/t", "--tables", "table_2",
                               "table_6", "--predictions", "/tmp/p"]
    assert "--runs outputs/fixture_results/runs" in make("-n", "tables", "SCALE=fixture").stdout  # smoke runs' folder
    assert "RUNS=folder" in make("help").stdout  # make help names them


def test_make_tables_on_a_missing_runs_folder_writes_nothing(tmp_path):
    """In a copy of the checkout's layout (CODA_EXP_ROOT: what make_tables.py would fall back on), so that a
    regression writes its tables there, not over the committed ones."""
    for name in ("configs", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "results" / "runs").mkdir(parents=True)
    missing = tmp_path / "nonexistent"
    out = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-o", ".venv/.installed", "tables",
                          f"RUNS={missing}", f"PY={sys.executable}"], cwd=tmp_path, capture_output=True, text=True,
                         check=False, timeout=120, env={**os.environ, "CODA_EXP_ROOT": str(tmp_path)})
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"--runs {missing}: no such folder" in errors[0], out.stderr
    assert not (tmp_path / "results" / "tables").exists()


def test_an_unknown_variable_is_an_error():
    out = make("-n", "tables", "RUN=/tmp/r")
    assert out.returncode == 2 and out.stdout == ""
    assert "RUN=/tmp/r: not a variable of this Makefile, nothing would read it; its variables:" in out.stderr
    assert " RUNS " in out.stderr and "goes before make: RUN=... make tables" in out.stderr
    assert make("-n", "estimate", "ARGS=task=mlu").returncode == 0  # every variable a target reads is known


def _stamped_venv(tmp_path, content: str):
    venv = tmp_path / "venv"
    venv.mkdir()
    stamp = venv / ".installed"
    stamp.write_text(content + "\n")
    os.utime(stamp, (1, 1))  # older than this checkout's pyproject.toml, as in a fresh clone beside an older venv
    return venv, stamp


def test_a_venv_installed_from_the_same_pyproject_is_only_touched(tmp_path):
    """``make test VENV=<another checkout's venv>`` from a fresh clone: every file of the clone is newer than that
    venv's stamp, which used to install again and re-point the venv's editable install at the clone. The stamp holds
    pyproject.toml's hash: the same file installs nothing (PYTHON=false would fail any install)."""
    import hashlib

    sha = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    venv, stamp = _stamped_venv(tmp_path, sha)
    done = subprocess.run(["make", "-s", "setup", f"VENV={venv}", "PYTHON=false"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=_user_env())
    assert done.returncode == 0, done.stderr
    assert stamp.stat().st_mtime > 1 and stamp.read_text().strip() == sha


def test_a_venv_of_another_pyproject_installs_again_and_says_whose_it_was(tmp_path):
    venv, _ = _stamped_venv(tmp_path, "0" * 64)
    (venv / "bin").mkdir()
    fake = venv / "bin" / "python"  # where that venv's coda_exp is imported from: another checkout
    fake.write_text("#!/bin/sh\necho /elsewhere/checkout\n")
    fake.chmod(0o755)
    done = subprocess.run(["make", "setup", f"VENV={venv}", "PYTHON=false"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=_user_env())
    assert done.returncode != 0  # the install ran (PYTHON=false -m venv fails)
    assert f"{venv}: coda_exp installed from /elsewhere/checkout" in done.stdout
    assert "false -m venv" in done.stderr + done.stdout


def test_the_make_rules_read_and_write_under_coda_exp_root(tmp_path):
    """CODA_EXP_ROOT=<folder> make reproduce-table-6 trained into <folder> (train.py's root) but made the table from
    the checkout's records; make run likewise. The checkout itself as the root changes nothing."""
    env = {**_user_env(), "CODA_EXP_ROOT": f"{tmp_path}/"}
    run = subprocess.run(["make", "-s", "--no-print-directory", "-o", ".venv/.installed", "-n", "reproduce-table-6",
                          "SCALE=fixture"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120, env=env)
    assert f"--runs {tmp_path}/outputs/fixture_results/runs --out {tmp_path}/outputs/fixture_results/tables" in run.stdout
    run = subprocess.run(["make", "-s", "--no-print-directory", "-o", ".venv/.installed", "-n", "run"], cwd=ROOT,
                         capture_output=True, text=True, check=False, timeout=120, env=env)
    assert f"--runs {tmp_path}/results/runs --task mlu" in run.stdout
    env["CODA_EXP_ROOT"] = str(ROOT)
    run = subprocess.run(["make", "-s", "--no-print-directory", "-o", ".venv/.installed", "-n", "tables"], cwd=ROOT,
                         capture_output=True, text=True, check=False, timeout=120, env=env)
    assert run.stdout.split()[1:] == ["scripts/make_tables.py", "--runs", "results/runs"]
