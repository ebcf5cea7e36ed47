"""Run records: schema validation, atomic writes, loading, run ids, git commit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from coda_exp import results
from coda_exp.results import (
    REQUIRED_KEYS,
    RecordWarning,
    git_commit,
    load_records,
    make_run_id,
    read_record,
    validate_record,
    write_record,
)


def make_record(**changes) -> dict:
    record = {
        "schema_version": 1,
        "run_id": make_run_id("snli", "decompatt_coda", 0),
        "task": "snli",
        "model": "decompatt_coda",
        "attention": {"name": "coda", "center_e": False, "n_fn": "sigmoid"},
        "seed": 0,
        "scale": "fixture",
        "metrics": {"test/acc": 0.8571, "val/acc": 0.86},
        "steps": 120,
        "epochs": 2,
        "wall_time_s": 3.5,
        "device": "cpu",
        "git_commit": "abc1234",
        "overrides": ["task=snli", "model=decompatt_coda"],
        "created": "2025-01-31T12:00:00+00:00",
    }
    record.update(changes)
    return record


def test_valid_record_passes_and_null_commit_is_allowed():
    assert validate_record(make_record()) is not None
    validate_record(make_record(git_commit=None, wall_time_s=4, created="2025-01-31T12:00:00Z"))


def test_required_keys_cover_the_schema():
    assert set(REQUIRED_KEYS) == set(make_record())


@pytest.mark.parametrize("key", sorted(REQUIRED_KEYS))
def test_missing_key_raises_naming_source_and_key(key):
    record = make_record()
    del record[key]
    with pytest.raises(ValueError, match=rf"runs/x\.json: missing required key '{key}'"):
        validate_record(record, source="runs/x.json")


@pytest.mark.parametrize(
    "key, bad",
    [
        ("schema_version", "1"),
        ("schema_version", 2),
        ("schema_version", True),
        ("run_id", "a/b"),
        ("run_id", ""),
        ("task", 3),
        ("task", ""),
        ("model", None),
        ("attention", "coda"),
        ("seed", "0"),
        ("seed", True),
        ("seed", 1.5),
        ("scale", ["cpu"]),
        ("metrics", [0.5]),
        ("metrics", {"test/acc": "0.5"}),
        ("metrics", {"test/acc": float("nan")}),
        ("metrics", {"test/acc": True}),
        ("steps", -1),
        ("steps", 1.0),
        ("epochs", "2"),
        ("wall_time_s", "3.5"),
        ("device", 0),
        ("git_commit", 1234),
        ("overrides", "task=snli"),
        ("overrides", [1]),
        ("created", "yesterday"),
        ("created", 1738324800),
    ],
)
def test_wrong_type_raises_naming_source_and_key(key, bad):
    with pytest.raises(ValueError, match=rf"rec\.json: key '{key}'"):
        validate_record(make_record(**{key: bad}), source="rec.json")


@pytest.mark.parametrize("status", ["finishd", "stopped", None])
def test_an_unknown_status_is_refused_naming_source_and_key(status):
    """A hand-edited status ("finishd") was pooled as a finished run."""
    with pytest.raises(ValueError, match=r"rec\.json: key 'status': expected one of finished, diverged"):
        validate_record(make_record(status=status), source="rec.json")
    assert validate_record(make_record(status="diverged"))["status"] == "diverged"


def test_non_dict_record_is_refused():
    with pytest.raises(ValueError, match="JSON object"):
        validate_record([1, 2], source="f.json")


def test_round_trip_preserves_extra_keys(tmp_path):
    record = make_record(status="finished", warnings=["w"], hparams={"context_mode": "conc"})
    path = write_record(record, tmp_path)
    assert path == tmp_path / f"{record['run_id']}.json"
    assert read_record(path) == record
    assert load_records(tmp_path) == [record]


def test_write_leaves_no_temp_files_and_refuses_duplicates(tmp_path):
    record = make_record()
    write_record(record, tmp_path / "runs")
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [f"{record['run_id']}.json"]
    with pytest.raises(FileExistsError):
        write_record(record, tmp_path / "runs")
    write_record(record, tmp_path / "runs", overwrite=True)
    assert len(list((tmp_path / "runs").iterdir())) == 1


def test_invalid_record_is_not_written(tmp_path):
    with pytest.raises(ValueError, match="'seed'"):
        write_record(make_record(seed="zero"), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_crash_during_write_leaves_no_partial_target(tmp_path, monkeypatch):
    def boom(fd):
        raise OSError("disk on fire")

    monkeypatch.setattr(results.os, "fsync", boom)
    record = make_record()
    with pytest.raises(OSError, match="disk on fire"):
        write_record(record, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_crash_during_overwrite_keeps_old_file(tmp_path, monkeypatch):
    record = make_record()
    path = write_record(record, tmp_path)
    before = path.read_bytes()

    def boom(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(results.os, "replace", boom)
    with pytest.raises(OSError, match="power cut"):
        write_record(make_record(run_id=record["run_id"], seed=9), tmp_path, overwrite=True)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_load_records_skips_corrupt_and_invalid_files_with_warning(tmp_path):
    good = make_record()
    write_record(good, tmp_path)
    (tmp_path / "truncated.json").write_text('{"schema_version": 1, "run_id": ')
    bad = make_record(run_id="bad-run")
    del bad["metrics"]
    (tmp_path / "bad-run.json").write_text(json.dumps(bad))
    (tmp_path / ".in-flight.json.tmp").write_text("{")
    (tmp_path / "notes.txt").write_text("not a record")

    with pytest.warns(RecordWarning) as caught:
        loaded = load_records(tmp_path)
    assert loaded == [good]
    messages = " ".join(str(w.message) for w in caught)
    assert "truncated.json" in messages
    assert "bad-run.json" in messages and "'metrics'" in messages

    with pytest.raises(ValueError, match=r"bad-run\.json|truncated\.json"):
        load_records(tmp_path, strict=True)


def test_load_records_sorted_and_missing_dir_is_empty(tmp_path):
    later = make_record(run_id="b-first-name", created="2025-02-01T00:00:00+00:00")
    earlier = make_record(run_id="z-last-name", created="2025-01-01T00:00:00+00:00")
    write_record(later, tmp_path)
    write_record(earlier, tmp_path)
    assert [r["run_id"] for r in load_records(tmp_path)] == ["z-last-name", "b-first-name"]
    assert load_records(tmp_path / "nope") == []


def test_make_run_id_unique_sortable_and_safe():
    ids = [make_run_id("iwslt15_envi", "coda/transformer x", seed) for seed in range(50)]
    assert len(set(ids)) == 50
    stamps = [rid.split("_", 1)[0] for rid in ids]
    assert stamps == sorted(stamps)  # creation order (ids made in the same microsecond differ by suffix)
    for rid in ids:
        assert "/" not in rid and " " not in rid
        assert "_iwslt15-envi_coda-transformer-x_s" in rid
        validate_record(make_record(run_id=rid))


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("CODA_EXP_COMMIT", raising=False)
    assert git_commit(tmp_path) is None  # not a repository

    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull},
        )

    git("init", "-q")
    assert git_commit(tmp_path) is None  # no commit yet
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-q", "-m", "init")
    clean = git_commit(tmp_path)
    assert clean and all(c in "0123456789abcdef" for c in clean)
    (tmp_path / "untracked.json").write_text("{}")
    assert git_commit(tmp_path) == clean  # untracked files (new run records) do not make it dirty
    Path(tmp_path / "a.txt").write_text("2")
    assert git_commit(tmp_path) == f"{clean}-dirty"
    monkeypatch.setenv("CODA_EXP_COMMIT", "abc1234")
    assert git_commit(tmp_path) == f"{clean}-dirty"  # git's answer wins where git can tell


def test_git_commit_of_a_copy_without_git(tmp_path, monkeypatch):
    """A tree copied without its .git (a cluster, a GPU machine) names its commit in CODA_EXP_COMMIT."""
    monkeypatch.setenv("CODA_EXP_COMMIT", " abc1234 ")
    assert git_commit(tmp_path) == "abc1234"
    monkeypatch.setenv("CODA_EXP_COMMIT", "")
    assert git_commit(tmp_path) is None


def test_a_record_edited_after_it_was_written_is_refused_when_read(tmp_path):
    record = make_record()
    path = write_record(record, tmp_path)
    assert read_record(path) == record and record[results.CHECKSUM_KEY] == results.record_checksum(record)
    edited = json.loads(path.read_text())
    edited["scale"], edited["metrics"]["test/acc"] = "paper", 0.99  # the probe's hand edit
    path.write_text(json.dumps(edited, indent=2))
    with pytest.raises(ValueError, match=r"does not match its record_sha256: the record was changed after"):
        read_record(path)
    with pytest.warns(RecordWarning, match=str(path)):
        assert load_records(tmp_path) == []
    # key order and indentation are no edit; a record written before records carried a checksum reads as before
    path.write_text(json.dumps(dict(reversed(list(record.items())))))
    assert read_record(path) == record
    del record[results.CHECKSUM_KEY]
    path.write_text(json.dumps(record))
    assert read_record(path) == record


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_the_code_commit_is_the_checkout_the_package_runs_from(tmp_path, monkeypatch):
    """A run writing outside the checkout (CODA_EXP_ROOT, a project folder) recorded git_commit: null: the commit was
    asked of its root folder, not of the code."""
    import coda_exp
    from coda_exp.results import code_commit

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CODA_EXP_ROOT", str(tmp_path))
    monkeypatch.delenv("CODA_EXP_COMMIT", raising=False)
    checkout = Path(coda_exp.__file__).resolve().parent.parent
    assert code_commit() == git_commit(checkout) and (code_commit() is not None) == (checkout / ".git").exists()
    monkeypatch.setattr(coda_exp.results, "__file__", str(tmp_path / "coda_exp" / "results.py"))  # no checkout
    monkeypatch.setenv("CODA_EXP_COMMIT", "abc1234")
    assert code_commit() == "abc1234"
