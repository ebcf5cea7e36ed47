"""CPU thread counts a run pins (``threads=N``): results on a CPU depend on them (matmul reduction order).

torch and numba each drive an OpenMP pool; with numba's ``omp`` threading layer they share one runtime, and setting
numba's count after torch's resets torch's (seen: ``numba.set_num_threads(1)`` turned torch's 1 into 2). So numba
is set first and torch last, and :func:`thread_counts` reads both back for the run record, where a drift would show.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)
_warned: set[tuple[int, int]] = set()  # (threads, cores) already warned about in this process: a sweep's jobs once


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS says, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _warn_oversubscribed(n: int) -> None:
    cores = available_cores()
    if n > cores and (n, cores) not in _warned:
        _warned.add((n, cores))
        log.warning("threads=%d on a machine where this process has %d cores: the threads take turns on them, which "
                    "is slower than threads=%d (the results are those of %d threads all the same)", n, cores, cores, n)


def pin_threads(n: int | None) -> dict[str, int]:
    """Use ``n`` CPU threads in torch and numba (None: leave both as found). Returns :func:`thread_counts`."""
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"threads must be an int >= 1 or null, got {n!r}")
        try:
            import numba
        except ImportError:  # numba is optional: torch alone
            numba = None
        if numba is not None:
            numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        torch.set_num_threads(n)
        _warn_oversubscribed(n)
    return thread_counts()


def thread_counts() -> dict[str, int]:
    """``{"torch": ..., "numba": ...}``: the counts in use now (numba's only where numba is installed)."""
    counts = {"torch": torch.get_num_threads()}
    try:
        import numba
    except ImportError:
        return counts
    counts["numba"] = numba.get_num_threads()
    return counts
