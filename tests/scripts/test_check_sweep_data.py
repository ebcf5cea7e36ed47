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
