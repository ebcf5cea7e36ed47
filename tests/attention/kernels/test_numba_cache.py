"""coda_exp.attention.kernels.numba_cache: numba's cache index read-pick-write under a file lock, so that two
processes compiling two specialisations of one function at once (warm-kernels' float32 and float64 processes) do
not map one signature to the other's machine code (``can't unbox array from PyObject``, numba/numba#10128)."""

from __future__ import annotations

import threading

import pytest

from coda_exp.attention.kernels import numba_cache

pytestmark = pytest.mark.skipif(not numba_cache.HAVE_NUMBA or numba_cache.fcntl is None,
                                reason="needs numba and fcntl")


def _race(tmp_path, monkeypatch, save):
    """Thread A saves key f32 and stops between its index read and its index write; meanwhile thread B saves f64
    into the same index (another file object, as another process would): where B is not held back, both pick
    ``.1.nbc``. The entries as a later process loads them."""
    from numba.core.caching import IndexDataCacheFile

    stamp = ("source stamp", 1)
    a, b = (IndexDataCacheFile(str(tmp_path), "kernel-10.py311", stamp) for _ in range(2))
    inside, go = threading.Event(), threading.Event()
    write_index = IndexDataCacheFile._save_index

    def held(self, overloads):
        if threading.current_thread().name == "A":
            inside.set()
            go.wait(10)
        write_index(self, overloads)

    monkeypatch.setattr(IndexDataCacheFile, "_save_index", held)
    first = threading.Thread(target=save, args=(a, "f32", "float32 code"), name="A")
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=save, args=(b, "f64", "float64 code"), name="B")
    second.start()
    second.join(0.5)  # unlocked: B saves all the way; locked: it waits for A's lock
    go.set()
    first.join(10)
    second.join(10)
    later = IndexDataCacheFile(str(tmp_path), "kernel-10.py311", stamp)
    return later.load("f32"), later.load("f64")


def test_the_cache_is_locked_here():
    from numba.core.caching import IndexDataCacheFile

    assert numba_cache.LOCKED and IndexDataCacheFile.save.coda_exp_locked
    assert numba_cache.install()  # again: wrapped once, not twice
    assert not getattr(IndexDataCacheFile.save.__wrapped__, "coda_exp_locked", False)


def test_two_savers_of_one_index_keep_both_entries(tmp_path, monkeypatch):
    from numba.core.caching import IndexDataCacheFile

    assert _race(tmp_path, monkeypatch, IndexDataCacheFile.save) == ("float32 code", "float64 code")


def test_without_the_lock_the_race_loses_an_entry(tmp_path, monkeypatch):
    """What the lock prevents, shown with numba's own save: the second saver's entry is lost (or mapped to the
    first's data), which a later process reads as another signature's machine code."""
    from numba.core.caching import IndexDataCacheFile

    assert _race(tmp_path, monkeypatch, IndexDataCacheFile.save.__wrapped__) != ("float32 code", "float64 code")
