"""Code of your own in a run: readers, models, task or data modules kept outside this package.

A reader registers under its name when its module is imported (``coda_exp.data.common.readers.register``) and a
``_target_`` names a class by its import path, so a run needs your modules imported before it checks its config.
Every process that builds a run from a config imports them (a training run, each job of a sweep, ``coda-exp eval``
and ``predict`` from the checkpoint's config, a sweep's data check):

- ``imports=[mylab.readers]`` (a top-level key, kept in the run's config and so in its checkpoint): module names,
  looked up on ``sys.path`` and then in the current folder, or paths of a ``.py`` file or a package folder
  (``imports=[./my_readers.py]``, relative to the current folder), whose folder is put on ``sys.path`` so that a
  ``_target_`` can name what they hold (``_target_: my_readers.MyDataModule``);
- the entry points of the group ``coda_exp.plugins`` of any installed distribution (in its ``pyproject.toml``:
  ``[project.entry-points."coda_exp.plugins"]`` ``mylab = "mylab.readers"``), imported in every run, no key needed.

A module that cannot be found or raises on import is one message naming it, its source and the error, before any
data loads (:class:`PluginError`). ``imports`` is kept out of a run's fingerprint (``fingerprint.OUTPUT_KEYS``):
where code is imported from is not part of an experiment's configuration; the readers and targets it names are.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from coda_exp.errors import UserError

GROUP = "coda_exp.plugins"
KEY = "imports"
_entry_points_loaded = False


class PluginError(UserError, ImportError):
    """A module of ``imports`` or an entry point of :data:`GROUP` that cannot be imported."""


def _entries(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable) and all(isinstance(v, str) for v in value):
        return list(value)
    raise PluginError(f"{KEY} = {value!r}: expected a list of module names or paths of .py files or package folders "
                      f"(e.g. {KEY}=[mylab.readers])")


def is_path(entry: str) -> bool:
    """Whether an entry of ``imports`` names a file or folder (``./my_readers.py``, ``lab/pkg``), not a module."""
    return entry.endswith(".py") or "/" in entry or os.sep in entry


def _module_of_path(entry: str) -> tuple[str, str]:
    """The module name of a ``.py`` file or package folder, and the folder to put on ``sys.path`` for it."""
    path = Path(entry).expanduser()
    resolved = path.resolve()
    if path.suffix == ".py" and resolved.is_file():
        return resolved.stem, str(resolved.parent)
    if resolved.is_dir() and (resolved / "__init__.py").is_file():
        return resolved.name, str(resolved.parent)
    what = "a .py file" if path.suffix == ".py" else "a package folder (with an __init__.py)"
    why = f"is not {what}" if resolved.exists() else "does not exist"
    raise PluginError(f"{KEY}: {entry} ({resolved}) {why}; a relative path is read from the current folder "
                      f"({Path.cwd()})")


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or an empty name
        return False
    except Exception:  # noqa: BLE001 - a parent package that raises on import: found; its import says what it raised
        return True


def _locate(entry: str) -> str:
    """The module name to import for ``entry``, with ``sys.path`` extended where it needs (a path's folder, or the
    current folder for a name found nowhere else): a :class:`PluginError` when it cannot be found."""
    if is_path(entry):
        name, folder = _module_of_path(entry)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        return name
    if not _findable(entry):
        here = str(Path.cwd())
        if here not in sys.path:
            sys.path.append(here)
            importlib.invalidate_caches()
        if not _findable(entry):
            near = difflib.get_close_matches(entry.partition(".")[0], _local_modules(Path(here)), n=1, cutoff=0.7)
            hint = f"; did you mean {near[0]}{entry.partition('.')[1]}{entry.partition('.')[2]}?" if near else ""
            raise PluginError(f"{KEY}: no module named {entry!r} on sys.path nor in the current folder ({here})"
                              f"{hint}; install its package, add its folder to PYTHONPATH, or give the path of its "
                              f"file ({KEY}=[path/to/{entry.rpartition('.')[2]}.py])")
    return entry


def _local_modules(folder: Path) -> list[str]:
    """The modules a folder holds: its ``.py`` files and package folders (for a did-you-mean)."""
    try:
        return sorted({p.stem for p in folder.glob("*.py")} | {p.parent.name for p in folder.glob("*/__init__.py")})
    except OSError:
        return []


def _raised_at(err: BaseException) -> str:
    """Where in the user's code an import raised: `` (file:line)`` of its last frame, or ``""`` (importlib's and this
    module's frames are not the user's: a module that is not there at all)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith("<")
              and f"{os.sep}importlib{os.sep}" not in f.filename and f.filename != __file__]
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def check(value) -> None:
    """That each entry of an ``imports`` value can be found, importing none (what a command line's check may do
    before Hydra sets up a run's logging): a :class:`PluginError` naming the first that cannot."""
    for entry in _entries(value):
        _locate(entry)


def problem(value) -> str | None:
    """:func:`check`'s message, or None: for the checks of a command line, which list problems."""
    try:
        check(value)
    except PluginError as err:
        return str(err)
    return None


def load(value=None, hint: str = "") -> list[str]:
    """Import the entry points of :data:`GROUP` (once per process) and each module of ``value`` (a config's
    ``imports``, or a config holding that key); returns the names of the modules of ``value``. ``hint`` ends a
    :class:`PluginError`'s message (where the value came from). Relative paths are made absolute in the saved config
    by ``coda_exp.config_nodes.anchor_paths``."""
    if value is not None and hasattr(value, "get") and not isinstance(value, str):
        value = value.get(KEY)
    _load_entry_points()
    names = []
    try:
        for entry in _entries(value):
            name = _locate(entry)
            try:
                importlib.import_module(name)
            except Exception as err:  # the user's module: whatever it raises is said in one message
                raise PluginError(f"{KEY}: importing {entry!r} failed: {type(err).__name__}: {err}"
                                  f"{_raised_at(err)}") from err
            names.append(name)
    except PluginError as err:
        raise PluginError(f"{err}{hint}") from err.__cause__
    return names


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    for point in metadata.entry_points(group=GROUP):
        try:
            point.load()
        except Exception as err:  # an installed plugin: named with its distribution, and again at the next load (a
            dist = getattr(point.dist, "name", None) or "an installed distribution"  # sweep's job ran without it)
            raise PluginError(f"the plugin {point.name} = {point.value!r} ({dist}, entry point group {GROUP!r}) "
                              f"failed to import: {type(err).__name__}: {err}{_raised_at(err)}") from err
    _entry_points_loaded = True  # once every one imported
