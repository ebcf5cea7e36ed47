"""An installed coda-exp trains: build the wheel, install it into a fresh virtual environment (the dependencies
come from the current environment, not the network) and run the ``coda-exp`` command outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests import FIXTURES, ROOT

pytestmark = pytest.mark.slow
SOURCES = ("pyproject.toml", "setup.py", "README.md", "coda_exp", "configs", "tests/fixtures")  # the wheel's sources


def sh(*cmd, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], check=False, capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources (no build/ or egg-info left in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__", "local")}
                                        if (ROOT / name).is_dir() else {}))
    dist = tmp_path_factory.mktemp("dist")
    sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, src)
    (whl,) = dist.glob("coda_exp-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    """A virtual environment with the wheel installed; torch & co. are this environment's (a path in a .pth
    file), while this environment's own coda_exp (an editable install hook) is not."""
    env = tmp_path_factory.mktemp("venv")
    sh(sys.executable, "-m", "venv", "--without-pip", env)
    py = env / "bin" / "python"
    site = Path(sh(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # without PYTHONPATH (a worktree's own coda_exp): pip would take the wheel for installed already
    sh(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "-q", wheel, env=outside_env())
    return env


def outside_env() -> dict[str, str]:
    """The environment of a user outside the checkout: no CODA_EXP_ROOT, no PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if k not in ("CODA_EXP_ROOT", "PYTHONPATH")}


def test_wheel_ships_every_config_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n.removeprefix("coda_exp/configs/") for n in names if n.startswith("coda_exp/configs/")}
    expected = {str(p.relative_to(ROOT / "configs")) for p in (ROOT / "configs").rglob("*.yaml")
                if p.relative_to(ROOT / "configs").parts[0] != "local"}
    assert shipped == expected
    assert "coda_exp/cli.py" in names and "coda_exp/__main__.py" in names


def test_wheel_ships_every_fixture_file(wheel):
    """scale=fixture reads them from the installed package (coda_exp/fixtures/<task>/): every file, byte for byte."""
    archive = zipfile.ZipFile(wheel)
    shipped = {n.removeprefix("coda_exp/fixtures/") for n in archive.namelist() if n.startswith("coda_exp/fixtures/")}
    expected = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert shipped == expected
    assert archive.read("coda_exp/fixtures/wikiqa/WikiQA-train.tsv") == (FIXTURES / "wikiqa" / "WikiQA-train.tsv").read_bytes()


def test_installed_package_trains_outside_the_checkout(venv, tmp_path):
    env = outside_env()
    work = tmp_path / "work"
    work.mkdir()
    where = sh(venv / "bin" / "python", "-c", "import coda_exp.cli as c; print(c.__file__, c.config_dir())",
               cwd=work, env=env).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where  # the installed copy, its own configs
    args = ["task=snli", "model=decompatt", "scale=fixture", "debug=fdr", "logger=none",
            f"data.dir={FIXTURES / 'snli'}", "trainer.enable_model_summary=false"]
    out = sh(venv / "bin" / "coda-exp", *args, cwd=work, env=env)
    assert "snli × decompatt" in out.stdout, out.stdout[-2000:]
    assert (work / "outputs" / "runs").is_dir()  # paths.root_dir is the working folder when installed
    sh(venv / "bin" / "python", "-m", "coda_exp", "--cfg", "job", "task=imdb", "model=transformer_classifier",
       cwd=work, env=env)


def test_the_fixture_smoke_run_works_from_any_folder(venv, tmp_path):
    """`cd /elsewhere && coda-exp task=wikiqa model=decompatt scale=fixture`: the fixtures come from the package."""
    env = outside_env()
    out = sh(venv / "bin" / "coda-exp", "task=wikiqa", "model=decompatt", "scale=fixture", "task.epochs=1",
             cwd=tmp_path, env=env)
    assert "wikiqa × decompatt" in out.stdout, out.stdout[-2000:]
    (record,) = (tmp_path / "outputs" / "fixture_results" / "runs").glob("*.json")
    assert json.loads(record.read_text())["scale"] == "fixture (task.epochs=1)"
    run_config = next((tmp_path / "outputs" / "runs").rglob("config_resolved.yaml")).read_text()
    (data_dir,) = [line.split(": ", 1)[1] for line in run_config.splitlines() if line.startswith("  dir: ")]
    assert Path(data_dir).is_relative_to(venv) and Path(data_dir).parts[-3:] == ("coda_exp", "fixtures", "wikiqa")
    # the commands are installed too: the smoke run's table, from the default folders under the current one
    tables = sh(venv / "bin" / "coda-exp", "tables", "--runs", "outputs/fixture_results/runs", "--tables", "table_2",
                cwd=tmp_path, env=env)
    written = tmp_path / "outputs" / "fixture_results" / "tables" / "table_2.md"  # beside the runs read
    assert written.is_file() and not (tmp_path / "results" / "tables").exists(), tables.stdout
    assert "Smoke test" in written.read_text(encoding="utf-8")
    help_ = sh(venv / "bin" / "coda-exp", "--help", cwd=tmp_path, env=env).stdout
    assert "tables" in help_ and "scale=fixture" in help_
    # its learning curve, and its checkpoint evaluated again: the training record's test metrics
    sh(venv / "bin" / "coda-exp", "plot-curves", "--runs", "outputs/fixture_results/runs", "--task", "wikiqa",
       "--metric", "val/map", "--out", "curves.png", cwd=tmp_path, env=env)
    assert (tmp_path / "curves.png").stat().st_size > 0
    ckpt = min((tmp_path / "outputs" / "runs").rglob("*.ckpt"))
    sh(venv / "bin" / "coda-exp", "eval", f"ckpt_path={ckpt}", "split=test", cwd=tmp_path, env=env)
    evals = [r for r in map(json.loads, (f.read_text() for f in tmp_path.rglob("runs/*.json")))
             if r.get("mode") == "eval"]
    trained = json.loads(record.read_text())
    assert len(evals) == 1 and evals[0]["trained_run_id"] == trained["run_id"]
    for name, value in evals[0]["metrics"].items():
        assert value == pytest.approx(trained["metrics"][name], abs=1e-6), name
