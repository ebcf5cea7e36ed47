"""The split names of every family: ``train``, ``validation`` (for model selection) and ``test``.

Benchmarks with several test sets name them ``test_<name>`` (MNLI's ``test_matched``, ``test_mismatched``).
"""

from __future__ import annotations

from coda_exp.data.common.errors import DataError

SPLITS = ("train", "validation", "test")


def is_test_split(split: str) -> bool:
    return split == "test" or split.startswith("test_")


def check_split(name: str, split: str, known: tuple[str, ...] | list[str] = SPLITS) -> str:
    """``split`` itself, or a DataError naming the benchmark and the splits it has."""
    if split not in known:
        raise DataError(f"{name}: unknown split {split!r}; expected one of {list(known)}")
    return split
