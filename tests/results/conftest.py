"""Fixtures of the table tests: the demo spec and the shipped specs."""

from __future__ import annotations

import pytest

from coda_exp.tables import find_specs, load_table_spec
from tests import ROOT
from tests.results.records import SPEC_YAML

SPEC_DIR = ROOT / "configs" / "tables"


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "t_demo.yaml"
    path.write_text(SPEC_YAML, encoding="utf-8")
    return load_table_spec(path)


@pytest.fixture(scope="session")
def shipped():
    """Every table spec under configs/tables, by id."""
    return {p.stem: load_table_spec(p) for p in find_specs(SPEC_DIR)}
