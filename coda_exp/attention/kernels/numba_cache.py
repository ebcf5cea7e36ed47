"""numba for the CPU kernels, with its on-disk cache (``cache=True``) safe for processes that compile side by side.

numba saves a compiled specialisation by reading the function's cache index, picking the first free data file name
(``<function>.N.nbc``), writing the index, then the data file. Two processes that compile two specialisations of
one function at once (``coda-exp warm-kernels``' float32 and float64 processes, ``pytest -n 2``, a ``-m`` sweep's
side-by-side jobs on a cold cache) can both pick ``.1.nbc``: the index then maps the float64 signature to the
float32 machine code, and every later process fails on its first call with ``TypeError: can't unbox array from
PyObject into native value`` (seen here in a fresh worktree's ``pytest -n 2``; numba/numba#10128, where numba's
developers suggest a file lock). So each index's read-pick-write-write runs under an exclusive ``flock`` of
``<index>.lock`` beside it, and each load under a shared one: a process never reads an index entry whose data file
another is still writing. Where ``fcntl`` is missing (Windows) or numba's cache class lacks the methods this
wraps (another numba), numba's own behaviour stays, unlocked (:data:`LOCKED` says which).
"""

from __future__ import annotations

import functools

try:  # numba is a declared dependency, but the torch paths must work without it
    from numba import njit, prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only on installs without numba
    njit = prange = None
    HAVE_NUMBA = False

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


def _locked(method, mode: int):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        lock_path = f"{self._index_path}.lock"
        try:
            handle = open(lock_path, "a")  # noqa: SIM115 (held for the call below)
        except OSError:  # a read-only cache folder: numba itself falls back elsewhere or does not save
            return method(self, *args, **kwargs)
        with handle:
            fcntl.flock(handle, mode)
            try:
                return method(self, *args, **kwargs)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    wrapper.coda_exp_locked = True
    return wrapper


def install() -> bool:
    """Wrap numba's ``IndexDataCacheFile.save`` (exclusive) and ``.load`` (shared) in the index's file lock, once;
    whether the cache is locked."""
    if not HAVE_NUMBA or fcntl is None:
        return False
    from numba.core import caching

    cls = getattr(caching, "IndexDataCacheFile", None)
    if cls is None or not all(hasattr(cls, name) for name in ("save", "load", "_load_index")):
        return False
    if "_index_path" not in cls.__init__.__code__.co_names:  # where the lock's path comes from (numba 0.5x-0.6x)
        return False
    if not getattr(cls.save, "coda_exp_locked", False):
        cls.save = _locked(cls.save, fcntl.LOCK_EX)
        cls.load = _locked(cls.load, fcntl.LOCK_SH)
    return True


LOCKED = install()
