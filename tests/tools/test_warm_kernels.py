"""coda-exp warm-kernels (coda_exp.tools.warm_kernels): the numba kernels compiled ahead, split by dtype over processes, only where the cache is cold."""

from __future__ import annotations

import os

import pytest

from coda_exp.attention.kernels import numba_cpu
from coda_exp.tools import warm_kernels as warm


@pytest.mark.skipif(not numba_cpu.HAVE_NUMBA, reason="numba is not installed")
def test_the_parts_split_by_dtype_and_cover_every_call(monkeypatch):
    paths = warm._paths()
    assert {kernel for kernel, _ in paths} == {"fused", "numba", "flash"}
    assert {spec["dtype"] for _, spec in paths} == {"float32", "float64"}
    ran = []
    monkeypatch.setattr(warm, "_run", lambda kernel, spec: ran.append((kernel, spec["dtype"])))
    assert [warm.warm(part, 2) for part in range(2)] == [8, 8]
    assert [{dtype for _, dtype in ran[:8]}, {dtype for _, dtype in ran[8:]}] == [{"float32"}, {"float64"}]
    assert sorted(ran) == sorted((kernel, spec["dtype"]) for kernel, spec in paths)


def _fake_kernels(tmp_path, monkeypatch):
    for source in warm._SOURCES:
        (tmp_path / source).write_text("# kernels\n")
    monkeypatch.setattr(warm, "_KERNELS", tmp_path)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    return tmp_path / "__pycache__"


def test_cold_until_every_source_has_a_newer_index(tmp_path, monkeypatch):
    cache = _fake_kernels(tmp_path, monkeypatch)
    assert warm.cold()  # no cache at all
    cache.mkdir()
    (cache / "numba_cpu.l1_forward-217.py311.nbi").write_text("")
    assert warm.cold()  # numba_flash has none
    index = cache / "numba_flash.flash_forward-164.py311.nbi"
    index.write_text("")
    assert not warm.cold()
    source = tmp_path / "numba_flash.py"
    os.utime(source, (index.stat().st_mtime + 10,) * 2)  # edited since: numba recompiles it
    assert warm.cold()
    os.utime(source, (index.stat().st_mtime - 10,) * 2)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert warm.cold()  # a cache we do not look into: warm it


def test_a_warm_cache_is_left_alone(tmp_path, monkeypatch, capsys):
    cache = _fake_kernels(tmp_path, monkeypatch)
    cache.mkdir()
    for stem in ("numba_cpu", "numba_flash"):
        (cache / f"{stem}.f-1.py311.nbi").write_text("")
    monkeypatch.setattr(warm.subprocess, "Popen", lambda *a, **k: pytest.fail("started a process"))
    assert warm.main(["--if-cold"]) == 0 and capsys.readouterr().out == ""


@pytest.mark.skipif(not numba_cpu.HAVE_NUMBA, reason="numba is not installed")
def test_one_part_runs_its_calls(monkeypatch):
    warm._run("fused", warm._paths()[0][1])  # a real call (the session's cache is warm: no compile)
    ran = []
    monkeypatch.setattr(warm, "_run", lambda kernel, spec: ran.append((kernel, spec["dtype"])))
    assert warm.warm(1, 2) == len(ran) == 8 and {dtype for _, dtype in ran} == {"float64"}


def test_jobs_below_one_is_one_message(capsys):
    with pytest.raises(SystemExit) as stop:
        warm.main(["--jobs", "0"])
    assert stop.value.code == 2 and "--jobs must be at least 1, got 0" in capsys.readouterr().err
