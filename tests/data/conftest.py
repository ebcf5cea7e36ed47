"""Helpers of the data tests, as fixtures: a pair data module on a fixture folder, a writable fixture copy."""

from __future__ import annotations

import shutil

import pytest

from coda_exp.data import PairDataModule
from tests import FIXTURES

RANKING = {"wikiqa", "trecqa", "udc"}


@pytest.fixture
def dm():
    """``dm(tmp, name="snli", src=None, **kw)``: a set-up PairDataModule reading ``src`` (default: the task's
    fixture) with its cache under ``tmp``; ranking for the ranking tasks, a 10 % held-out validation for MNLI."""
    def make(tmp, name="snli", src=None, **kw):
        if name == "mnli":
            kw.setdefault("validation_from_train", 0.1)
        m = PairDataModule(name, dir=str(src or FIXTURES / name), cache_dir=str(tmp / "cache"),
                           ranking=name in RANKING, **kw)
        m.setup()
        return m
    return make


@pytest.fixture
def copy_fixture():
    """``copy_fixture(tmp, name)``: a copy of ``tests/fixtures/<name>`` under ``tmp`` (to damage or extend)."""
    def copy(tmp, name):
        return shutil.copytree(FIXTURES / name, tmp / name)
    return copy
