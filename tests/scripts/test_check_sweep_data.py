"""scripts/check_sweep_data.py: a sweep whose tasks lack their data stops before any job, with one message naming
each task and what it lacks; a sweep whose data is there (the fixtures; MLU, generated) starts."""

from __future__ import annotations


def test_missing_data_is_one_message_before_any_job(load_script, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    check = load_script("check_sweep_data")
    empty = f"paths.data_dir={tmp_path}"  # no data/<task> folder anywhere
    assert check.main(["experiment=table_2", empty]) == 2
    err = capsys.readouterr().err
    assert "the sweep cannot start, 3 task(s) lack their data" in err
    assert "trecqa: no data folder" in err and "has no hub copy" in err  # no hub copy at all
    assert "wikiqa: no data folder" in err and "cannot be fetched offline" in err  # a hub copy, but offline
    assert check.main(["experiment=table_2", "scale=fixture"]) == 0  # the fixtures are there
    assert check.main(["experiment=table_6", empty]) == 0  # MLU is generated
    assert check.main(["experiment=table_2", "scale=fixture", "data.dir=/nonexistent/folder"]) == 2
    assert "data.dir '/nonexistent/folder' does not exist" in capsys.readouterr().err


def test_sweep_values_are_checked_not_refused(load_script, capsys):
    """RUN_ARGS of a sweep (seed=1,2; data.dir=A,B) pass as train.py -m takes them: each swept value is composed
    and its data checked, instead of Hydra's "Ambiguous value ... add --multirun"."""
    check = load_script("check_sweep_data")
    assert check.main(["experiment=table_6", "scale=fixture", "seed=1,2", "model=transformer,coda_transformer"]) == 0
    assert check.main(["experiment=table_2", "scale=fixture", "task=wikiqa", "data.dir=/nonexistent/a,/nonexistent/b"]) == 2
    err = capsys.readouterr().err
    assert "1 task(s) lack their data" in err and "Ambiguous" not in err
    assert "wikiqa: data.dir '/nonexistent/a' does not exist" in err
    assert "wikiqa: data.dir '/nonexistent/b' does not exist" in err


def test_an_unknown_scale_is_one_line_naming_the_scales(load_script, capsys):
    check = load_script("check_sweep_data")
    assert check.main(["experiment=table_6", "scale=bogus"]) == 2
    err = capsys.readouterr().err
    assert err == "error: scale=bogus: no such scale (configs/scale/bogus.yaml); expected one of: cpu, fixture, paper\n"
    assert check.main(["experiment=table_6", "seed=1,"]) == 2  # an override Hydra cannot parse: its message
    assert "Traceback" not in capsys.readouterr().err


def test_make_reproduce_refuses_an_unknown_scale_before_anything_runs():
    import subprocess
    from pathlib import Path

    out = subprocess.run(["make", "reproduce-table-6", "SCALE=bogus", "-o", ".venv/.installed", "PY=false"],
                         cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert "error: SCALE=bogus: expected one of: cpu fixture paper" in out.stderr
