"""Run folders named by their configuration, in real runs of train.py (``coda_exp/run_tag.py``): a single run's
and a sweep's jobs', read back by ``coda-exp runs`` and found by ``resume=auto``."""

import json
import re

import pytest
from omegaconf import OmegaConf

from coda_exp import auto_resume
from coda_exp.tools import runs
from tests.e2e.helpers import train

FIXTURE = ["task=wikiqa", "scale=fixture", "task.epochs=1"]


@pytest.mark.slow  # ~19 s of subprocesses; in make test, tests/test_resume_tidy.py runs and resumes tagged folders
def test_a_run_and_a_sweeps_jobs_are_named_by_their_overrides(tmp_path):
    proc = train([*FIXTURE, "optimizer.lr=3e-4"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (single,) = (tmp_path / "outputs" / "runs" / "wikiqa-decompatt").iterdir()
    assert re.fullmatch(r"[0-9_.-]+-s1-lr_3e-4@[0-9a-f]{6}", single.name), single.name
    assert (single / "checkpoints" / "last.ckpt").is_file()
    mine = OmegaConf.create({"paths": {"log_dir": str(tmp_path / "outputs")}, "task": {"name": "wikiqa"},
                             "model": {"name": "decompatt"}, "seed": 1})
    assert auto_resume.candidates(mine, tmp_path / "elsewhere" / "x") == [single.resolve()]  # resume=auto finds it
    proc = train(["-m", *FIXTURE, "model.dropout=0,0.5", "seed=2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p.name for p in (tmp_path / "outputs" / "multiruns").glob("*/*-wikiqa-*"))
    assert [re.sub(r"@[0-9a-f]{6}$", "", j) for j in jobs] == ["0-wikiqa-decompatt-s2-dropout_0",
                                                             "1-wikiqa-decompatt-s2-dropout_0.5"], jobs
    # coda-exp runs lists each with its task, model and seed, and the configuration its name says
    assert runs.main(["--log-dir", str(tmp_path / "outputs"), "--json", str(tmp_path / "runs.json")]) == 0
    rows = {re.sub(r"@[0-9a-f]{6}$", "", r["folder"].rsplit("/", 1)[1]): r
            for r in json.loads((tmp_path / "runs.json").read_text())}
    assert {(r["task"], r["model"], r["seed"], r["state"]) for r in rows.values()} == {
        ("wikiqa", "decompatt", 1, "finished"), ("wikiqa", "decompatt", 2, "finished")}
    assert rows["1-wikiqa-decompatt-s2-dropout_0.5"]["config"] == "model.dropout=0.5"
