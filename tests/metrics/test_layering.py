"""Dependencies point one way (DESIGN.md): attention knows nothing of models, models nothing of tasks, tasks nothing of
Hydra, metrics nothing of data and data nothing of metrics; no module imports a private name of another package (an
AST scan of imports, lazy ones included)."""

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


LAYERS = {  # package -> what it must not import
    "attention": ("coda_exp.models", "coda_exp.tasks", "coda_exp.data", "coda_exp.metrics", "coda_exp.pipeline",
                  "hydra", "omegaconf", "pytorch_lightning"),
    "models": ("coda_exp.tasks", "coda_exp.data", "coda_exp.pipeline", "hydra", "omegaconf", "pytorch_lightning"),
    "tasks": ("coda_exp.data", "coda_exp.pipeline", "hydra", "omegaconf"),
    "metrics": ("coda_exp.data", "coda_exp.tasks", "coda_exp.models"),
    "data": ("coda_exp.metrics", "coda_exp.tasks", "coda_exp.models", "coda_exp.pipeline"),
    "algolisp": ("coda_exp.data", "coda_exp.metrics"),
}


@pytest.mark.parametrize("package, forbidden", [(p, f) for p, fs in LAYERS.items() for f in fs])
def test_no_import_across_the_layers(package, forbidden):
    assert offenders(package, forbidden) == []


def _package_of(module: str) -> str:
    """``coda_exp.data.common.vocab`` -> ``coda_exp.data``; a top-level module is its own package."""
    return ".".join(module.split(".")[:2])


def test_no_module_imports_a_private_name_of_another_package():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _package_of(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("coda_exp"):
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and _package_of(f"{node.module}.{alias.name}") != own:
                        bad.append(f"{path.relative_to(ROOT)} imports {node.module}.{alias.name}")
    assert bad == []


def test_the_scan_sees_imports(tmp_path, monkeypatch):
    fake = tmp_path / "coda_exp" / "metrics"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("def f():\n    from coda_exp.data.common import vocab\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "coda_exp")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert offenders("metrics", "coda_exp.data") == ["coda_exp/metrics/bad.py imports coda_exp.data.common",
                                                     "coda_exp/metrics/bad.py imports coda_exp.data.common.vocab"]
