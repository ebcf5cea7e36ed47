"""Dependencies point one way (DESIGN.md): attention knows nothing of models, models nothing of tasks, tasks nothing of
Hydra, metrics nothing of data and data nothing of metrics; no module imports a private name of another package (an
AST scan of imports, lazy ones included), nor calls OmegaConf's private node API."""

from __future__ import annotations

import ast
import re
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
    "peers": ("coda_exp.models", "coda_exp.tasks", "coda_exp.data", "coda_exp.pipeline", "hydra", "omegaconf"),
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


# OmegaConf's private node API (a minor release may rename any of it): the package reads configs through the public
# one (OmegaConf.is_missing, is_interpolation, masked_copy, to_container(resolve=False))
OMEGACONF_PRIVATE = re.compile(r"\._(get_node|value|is_missing|is_none|is_interpolation|get_full_key|metadata|"
                               r"content|get_flag|set_flag|set_value|iter_ex|dereference_node|"
                               r"maybe_dereference_node|get_parent|is_optional)\(")


def test_no_module_reads_omegaconfs_private_node_api():
    bad = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in sorted(PACKAGE.rglob("*.py"))
           for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
           if OMEGACONF_PRIVATE.search(line)]
    assert bad == []
    assert OMEGACONF_PRIVATE.search("str(node._get_node(key)._value())")  # the scan sees a call

def test_the_scan_sees_imports(tmp_path, monkeypatch):
    fake = tmp_path / "coda_exp" / "metrics"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("def f():\n    from coda_exp.data.common import vocab\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "coda_exp")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert offenders("metrics", "coda_exp.data") == ["coda_exp/metrics/bad.py imports coda_exp.data.common",
                                                     "coda_exp/metrics/bad.py imports coda_exp.data.common.vocab"]


def _runtime_imports(tree: ast.AST):
    """Import nodes that run (lazy ones in function bodies included), not those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in _runtime_imports(child))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """coda_exp module -> the coda_exp modules it imports (``from pkg import name`` is ``pkg.name`` when that is a
    module); a package's ``__init__`` is not counted as imported by its submodules."""
    modules = {".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                        for a in node.names] if node.module and node.level == 0 else [])
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_in_coda_exp():
    assert cycles(import_graph()) == []


def test_the_cycle_scan_sees_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "coda_exp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from coda_exp import b\n")
    (pkg / "b.py").write_text("def f():\n    from coda_exp.a import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from coda_exp import a\n")
    assert cycles(import_graph(pkg)) == [["coda_exp.a", "coda_exp.b"]]


ATTENTION_KERNELS_MAY_IMPORT = ("coda_exp.attention.activations", "coda_exp.attention.flash_spec",
                                "coda_exp.attention.shapes", "coda_exp.attention.kernels")


def test_attention_kernels_import_only_activations_the_contract_and_one_another():
    """The backends sit below the decision (``dispatch``) and the options: one file per backend, none above."""
    graph = import_graph()
    bad = [f"{m} imports {t}" for m, targets in sorted(graph.items()) if m.startswith("coda_exp.attention.kernels")
           for t in sorted(targets) if not t.startswith(ATTENTION_KERNELS_MAY_IMPORT)]
    assert bad == []


def test_no_module_of_the_attention_package_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in (PACKAGE / "attention").rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def test_only_the_entry_point_reaches_the_tools():
    """``coda_exp.tools`` (the commands: tables, plots, data preparation) is the top layer: no module imports it
    (``coda_exp.commands`` names its modules, imported when a command runs), and it imports no entry point."""
    graph = import_graph()
    below = [f"{m} imports {t}" for m, targets in sorted(graph.items()) if not m.startswith("coda_exp.tools")
             for t in sorted(targets) if t.startswith("coda_exp.tools")]
    above = [f"{m} imports {t}" for m, targets in sorted(graph.items()) if m.startswith("coda_exp.tools")
             for t in sorted(targets) if t in ("coda_exp.cli", "coda_exp.commands", "coda_exp.usage")]
    assert below == [] and above == []


def test_nothing_in_the_package_imports_the_peers():
    """``coda_exp.peers`` (other implementations of CoDA, for benchmarks: KeOps) stays off the training path: only
    scripts and tests import it."""
    graph = import_graph()
    assert [f"{m} imports {t}" for m, targets in sorted(graph.items()) if not m.startswith("coda_exp.peers")
            for t in sorted(targets) if t.startswith("coda_exp.peers")] == []
