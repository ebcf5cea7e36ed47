"""Dependencies point one way: metrics know nothing of data, data nothing of metrics (an AST scan of imports)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests import ROOT

PACKAGE = ROOT / "coda_exp"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def offenders(package: str, forbidden: str) -> list[str]:
    bad = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        hits = [m for m in imported_modules(path) if m == forbidden or m.startswith(forbidden + ".")]
        bad += [f"{path.relative_to(ROOT)} imports {m}" for m in sorted(hits)]
    return bad


@pytest.mark.parametrize("package, forbidden", [("metrics", "coda_exp.data"), ("data", "coda_exp.metrics"),
                                                ("algolisp", "coda_exp.data"), ("algolisp", "coda_exp.metrics")])
def test_no_import_across_the_layers(package, forbidden):
    assert offenders(package, forbidden) == []


def test_the_scan_sees_imports(tmp_path, monkeypatch):
    fake = tmp_path / "coda_exp" / "metrics"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("def f():\n    from coda_exp.data.common import vocab\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "coda_exp")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert offenders("metrics", "coda_exp.data") == ["coda_exp/metrics/bad.py imports coda_exp.data.common",
                                                     "coda_exp/metrics/bad.py imports coda_exp.data.common.vocab"]
