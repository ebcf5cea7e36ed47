"""Shared test helpers: composing the Hydra config the way train.py does, offline, into a temporary folder."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

from tests import ROOT

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ["CODA_EXP_ROOT"] = str(ROOT)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # torch + numba OpenMP pools: see docs/attention.md
# Tests stop runs with SIGINT (Ctrl-C). A test process started with SIGINT ignored (a background job of a
# non-interactive shell: `pytest ... &` in a script) keeps it ignored, as Python does, and so do the runs it starts
# (coda_exp.stops: on purpose) and their child processes: give the tests Python's own handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _parse_each_yaml_text_once() -> None:
    """Hydra parses every config file again at each composition (PyYAML's pure-Python loader: a quarter of a
    composition's time), and the tests compose over a thousand times: OmegaConf.load keeps each text's parse and hands out a
    copy. A text parsed for the first time is parsed from its file as before, so a YAML error names its file, line
    and column as it does in a run; a changed file is another text."""
    import copy

    import yaml
    from omegaconf import OmegaConf
    from omegaconf._utils import get_yaml_loader

    parsed, original = {}, OmegaConf.load

    def load(file_):
        if isinstance(file_, (str, Path)):
            with open(os.path.abspath(file_), encoding="utf-8") as f:
                return load(f)
        if not (getattr(file_, "read", None) and getattr(file_, "seekable", lambda: False)()):
            return original(file_)
        start = file_.tell()
        text = file_.read()
        if text not in parsed:
            file_.seek(start)
            parsed[text] = yaml.load(file_, Loader=get_yaml_loader())
        obj = copy.deepcopy(parsed[text])
        if obj is not None and not isinstance(obj, (list, dict, str)):
            raise OSError(f"Invalid loaded object type: {type(obj).__name__}")  # as OmegaConf.load
        return OmegaConf.create() if obj is None else OmegaConf.create(obj)

    OmegaConf.load = staticmethod(load)


_parse_each_yaml_text_once()


@pytest.fixture(autouse=True)
def _hydra_config_cleared():
    """Hydra's config of a run (``HydraConfig``, which ``${hydra:...}`` reads) as a fresh process has it, before and
    after each test: a test that composed a config (``compose_cfg``) or ran the entry point in this process left it
    set, and a later test of the worker resolved the run folder's ``${hydra:overrides.task}`` where a user's command
    line cannot (the run-folder check was skipped, Hydra's traceback in a real run, and the test passed)."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None
    yield
    HydraConfig.instance().cfg = None


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """A test running the entry point in this process (cli.main) leaves Hydra's logging config, whose console handler
    writes to that test's captured stderr, closed after it: later tests of the worker logged into a closed stream
    ("--- Logging error ---" in their stderr) and counted its filters. The root logger's handlers and level as they
    were before each test."""
    import logging

    before, level = set(map(id, logging.root.handlers)), logging.root.level
    yield
    for handler in list(logging.root.handlers):  # (pytest's own capturing handlers come and go by themselves)
        if id(handler) not in before and not type(handler).__module__.startswith("_pytest"):
            logging.root.removeHandler(handler)
            handler.close()
    logging.root.setLevel(level)


def compose_cfg(overrides: list[str], tmp: Path):
    """The train config with ``overrides``, every output path under ``tmp``, HydraConfig set (as in a run)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from coda_exp import resolvers  # noqa: F401 (the configs' ${fixture_dir:...}: registered as a run registers it)

    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "configs")):
        cfg = compose("train", overrides=[
            f"paths.results_dir={tmp}/results", f"paths.cache_dir={tmp}/cache", f"paths.log_dir={tmp}/outputs",
            f"paths.data_dir={tmp}/data",
            f"paths.output_dir={tmp}/run", *overrides], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


@pytest.fixture
def make_cfg(tmp_path):
    """``make_cfg(*overrides)``: the composed train config, every output path under the test's ``tmp_path``."""
    return lambda *overrides: compose_cfg(list(overrides), tmp_path)


def train_fixture_model(compose, folder, *overrides):
    """A fixture model trained under ``folder``: (its record, the checkpoint its test used)."""
    from coda_exp import results
    from coda_exp.pipeline import run

    run(compose(["scale=fixture", "logger=none", *overrides], folder))
    (record,) = results.load_records(folder / "results" / "runs", strict=True)
    return record, record["best_checkpoint"]


def eval_paths(folder) -> list[str]:
    """``coda-exp eval``/``predict`` arguments that put every output under ``folder``."""
    return [f"paths.results_dir={folder}/results", f"paths.log_dir={folder}/outputs",
            f"paths.cache_dir={folder}/cache", "logger=none"]


@pytest.fixture(scope="session")
def snli_model(tmp_path_factory):
    """An SNLI model (pair classification) trained for 2 epochs, shared by the tests of eval and predict:
    (its training folder, its record, the checkpoint its test used)."""
    folder = tmp_path_factory.mktemp("snli")
    record, ckpt = train_fixture_model(compose_cfg, folder, "task=snli", "task.epochs=2", "seed=2")
    return folder, record, ckpt


@pytest.fixture(scope="session")
def compose():
    """``compose(overrides, folder)``: :func:`compose_cfg` for tests that choose the output folder."""
    return compose_cfg


@pytest.fixture(scope="session")
def load_script():
    """``load_script("plot_coda")`` / ``load_script("studies/mlu/gate_at_init")``: a module of ``scripts/``
    imported from its file (scripts are not a package)."""
    def load(path: str):
        name = path.replace("/", "_")
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{path}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    return load


@pytest.fixture
def one_thread():
    """One torch thread for the test: tiny models run faster without pool wake-ups, much faster on a busy
    machine (``pytestmark = pytest.mark.usefixtures("one_thread")`` in a module)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class _FakeGraph:
    def __init__(self):
        self.captured = False

    def pool(self):
        return "pool"

    def replay(self):
        raise AssertionError("replayed through _Graph.replay only")


@pytest.fixture
def fake_cuda(monkeypatch):
    """FastStep's CUDA-graph path on a CPU: torch.cuda's streams and graphs stood in for, and a replay runs the
    captured body eagerly into the buffers the capture saw (a real graph writes those, whatever ``p.grad`` is
    now). Returns the memory pools the captures were given."""
    from coda_exp import fast_step

    monkeypatch.setattr(fast_step, "_on_cuda", lambda batch: True)
    stream = type("Stream", (), {"wait_stream": lambda self, other: None})
    monkeypatch.setattr(torch.cuda, "Stream", stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    captures = []

    @contextlib.contextmanager
    def graph(g, pool=None):
        captures.append(pool)
        yield

    monkeypatch.setattr(torch.cuda, "graph", graph)

    def replay(self, batch):  # what a replay computes: the captured body on the static inputs, into the static loss
        for key, static in self.inputs.items():
            static.copy_(batch[key])
        # a real graph's backward writes the buffers it captured, whatever p.grad is now: so does this one
        seen = [p.grad for p, _ in self.grads]
        for p, buf in self.grads:
            p.grad = buf
        self.loss.copy_(self.body())
        for (p, _), grad in zip(self.grads, seen):
            p.grad = grad
        return self.loss

    monkeypatch.setattr(fast_step._Graph, "replay", replay)
    return captures


def pytest_sessionstart(session):
    """Before any test (in the controller, before pytest-xdist starts its workers): compile the numba kernels into
    their cache where it is cold, one process per dtype side by side (``coda-exp warm-kernels``), instead of in the
    workers' first CoDA tests (a fresh clone's ``make test``: 4 min 54 s with this, 5 min 15 s without)."""
    if hasattr(session.config, "workerinput"):
        return
    from coda_exp.tools import warm_kernels

    warm_kernels.main(["--jobs", "2", "--if-cold"])


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip where torch sees no CUDA device (every CI run; a lent GPU machine runs them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (pytest -m gpu on a GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
