"""coda_exp.io.atomic_write: the one way the project writes files."""

from __future__ import annotations

import os
import stat

import pytest

from coda_exp.io import atomic_write, atomic_write_text


def test_writes_text_and_bytes(tmp_path):
    assert atomic_write_text(tmp_path / "a" / "t.txt", "héllo\n").read_text(encoding="utf-8") == "héllo\n"
    with atomic_write(tmp_path / "b.bin", "wb") as f:
        f.write(b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b.bin", "t.txt"]  # no temporary file left


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    target = atomic_write_text(tmp_path / "r.json", "old")
    with pytest.raises(RuntimeError), atomic_write(target) as f:
        f.write("half of the new")
        raise RuntimeError("crash while writing")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_permissions_follow_the_umask_like_open(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "rec.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600: records are shared files


def test_mode_is_checked(tmp_path):
    with pytest.raises(ValueError, match="mode must be"), atomic_write(tmp_path / "x", "a"):
        pass


def test_a_write_to_a_full_disk_names_the_file(tmp_path):
    """os.write's ENOSPC names no file; the error a user reads (coda_exp.checkpoint_io.disk_full) should."""
    import errno

    target = tmp_path / "record.json"
    with pytest.raises(OSError) as err, atomic_write(target) as f:
        f.write("{")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert not list(tmp_path.iterdir())
