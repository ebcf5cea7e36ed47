"""A damaged ``datasets`` cache (the examples the readers cached under ``<cache_dir>/datasets``): how it is told from
other errors, and which folder holds it, so that :meth:`DataModule.setup <coda_exp.data.common.base.DataModule.setup>`
deletes that folder and builds it again from the data files (the cache is derived data) instead of stopping.

The cache of one split is one folder ``<cache_dir>/datasets/generator/default-fingerprint=<key>/``: the reader's
examples (``generator-train.arrow``), their ``dataset_info.json`` and the files of the steps computed from them
(``cache-<key>.arrow``: filtered, tokenised). pyarrow reports a cut-short ``.arrow`` file as an ``ArrowException``
or, reading a record batch of a file cut short, as a plain ``OSError`` ("Expected to be able to read 2128 bytes
for message body, got 628"); a cut-short ``dataset_info.json`` is a JSONDecodeError raised inside ``datasets``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from coda_exp.errors import cause_of

GENERATOR = "generator"  # the datasets library's folder of Dataset.from_generator caches, one per fingerprint


def _frames(err: BaseException):
    """The frames ``err`` was raised through, outermost first."""
    tb = err.__traceback__
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _raised_inside(err: BaseException, package: str) -> bool:
    """Whether ``err`` passed through the code of ``package`` (``datasets``; ``pyarrow``, whose Cython frames are
    named ``pyarrow/ipc.pxi``)."""
    return any(f"{os.sep}{package}{os.sep}" in (name := frame.f_code.co_filename) or name.startswith(f"{package}/")
               for frame in _frames(err))


def arrow_error(err: BaseException) -> BaseException | None:
    """The error behind ``err`` that says a cache file of ``datasets`` cannot be read, if there is one: pyarrow's (an
    ``ArrowException``, or an ``OSError`` raised inside pyarrow: a cut-short ``.arrow`` file), or a JSONDecodeError
    raised inside ``datasets`` (its ``dataset_info.json``; the project's readers name a malformed data line in a
    DataError instead, and an OSError of theirs is a DataError naming the data file)."""
    try:
        from pyarrow.lib import ArrowException
    except ImportError:
        ArrowException = ()  # no pyarrow: only the JSON metadata can be the cache's
    found = cause_of(err, ArrowException) if ArrowException else None
    if found is None and (bad := cause_of(err, OSError)) is not None and _raised_inside(bad, "pyarrow"):
        found = bad
    if found is None and (bad := cause_of(err, json.JSONDecodeError)) is not None:
        found = bad if _raised_inside(bad, "datasets") else None
    return found


def damaged_folder(err: BaseException, cache_dir: Path) -> Path | None:
    """The folder of the split cache ``err`` (an :func:`arrow_error`) was reading, ``<cache_dir>/datasets/generator/
    <fingerprint>``, or None where it names none (a hub dataset's own cache, outside ``cache_dir``): the path a
    frame of ``datasets`` was reading (``filename``, ``dataset_info_dir``), innermost first."""
    root = (Path(cache_dir) / "datasets" / GENERATOR).resolve()
    for frame in reversed(list(_frames(err))):
        for value in list(frame.f_locals.values()):
            if not isinstance(value, (str, os.PathLike)) or len(str(value)) > 4096 or os.sep not in str(value):
                continue
            try:
                parts = Path(value).resolve().relative_to(root).parts
            except (ValueError, OSError, RuntimeError):
                continue
            if len(parts) >= 2:  # a file or folder inside one split's cache, not the generator folder itself
                return root / parts[0]
    return None
