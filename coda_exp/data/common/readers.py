"""The one reader pattern of every family: a :class:`Reader` knows one benchmark's official files and hub copy.

``reader.read(split, directory)`` yields the examples of ``split`` (one dict per example, in a schema fixed by
the family: ``text_a``/``text_b``/``label``/``group`` for pairs, ``text``/``label``/``index`` for texts,
``src``/``tgt``/``index`` for sequences) from the official files in ``directory`` or, when it is None, from the
Hugging Face hub. A subclass fills in :meth:`Reader.layout` (the files, in words), :meth:`Reader.local_files` (the
files holding a split) and :meth:`Reader.read_local`; it reads them with :mod:`coda_exp.data.common.files`, so that
an empty file or bytes that are not UTF-8 are a :class:`DataError` naming the file (and line) and the split. A split
whose files yield no example at all is a :class:`DataError` too, before any training.
"""

from __future__ import annotations

import difflib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import file_key
from coda_exp.data.common.splits import SPLITS, check_split


@dataclass(frozen=True)
class Reader(ABC):
    """One benchmark: its name, its hub copy (``hub_id``, None when there is none) and where to get its files."""

    name: str
    hub_id: str | None
    source_hint: str

    def splits(self) -> tuple[str, ...]:
        """The splits this benchmark has (``test_<name>`` for several test sets)."""
        return SPLITS

    @abstractmethod
    def layout(self) -> str:
        """The files or folders expected in the data directory, in words (for error messages)."""

    @abstractmethod
    def local_files(self, directory: Path, split: str) -> list[Path]:
        """The official file(s) or folder(s) holding ``split`` in ``directory``; a DataError naming what is missing."""

    @abstractmethod
    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        """The examples of ``split``, read from its official files and validated row by row."""

    def read_hub(self, split: str) -> Iterator[dict]:
        """The examples of ``split`` of the hub dataset (readers with a ``hub_id`` override this)."""
        raise DataError(f"{self.name}: there is no Hugging Face hub copy of this benchmark; download "
                        f"{self.layout()} and pass data.dir=DIR. {self.source_hint}")

    def read(self, split: str, directory: str | os.PathLike | None = None) -> Iterator[dict]:
        """Examples of ``split`` from the files in ``directory`` or, when it is None, from the hub."""
        check_split(self.name, split, self.splits())
        if directory is None:
            yield from self._hub(split)
            return
        directory = Path(directory)
        count = 0
        for count, example in enumerate(self.read_local(directory, split), 1):
            yield example
        if count == 0:
            files = ", ".join(str(p) for p in self.local_files(directory, split))
            raise DataError(f"{self.name}: {files} holds no example for the {split} split; expected {self.layout()}")

    def _hub(self, split: str) -> Iterator[dict]:
        if self.hub_id is None:
            yield from Reader.read_hub(self, split)  # raises the "no hub copy" error
            return
        if Path(self.hub_id).exists():  # the datasets library takes a local path before a hub id, and caches it
            raise DataError(f"{self.name}: no data directory was given, so the hub dataset {self.hub_id!r} is read, "
                            f"but {Path(self.hub_id).resolve()} in the current folder has that name and the datasets "
                            f"library would read it instead (and cache it as the hub's): pass "
                            f"data.dir={Path(self.hub_id).resolve()} to read it as {self.layout()}, or run from "
                            "another folder")
        try:
            yield from self.read_hub(split)
        except DataError:
            raise
        except Exception as e:
            raise DataError(f"{self.name}: no data directory was given (data.dir is null: paths.data_dir, data/ by "
                            f"default, holds no folder named as the task, e.g. data/<task>/ for task=<task>) and the "
                            f"hub dataset {self.hub_id!r} could not be loaded ({type(e).__name__}: {e}). Download "
                            f"{self.layout()} into that folder, <paths.data_dir>/<task>/ (read without data.dir), or "
                            f"pass data.dir=DIR. {self.source_hint}") from e

    def source_key(self, split: str, directory: str | os.PathLike | None) -> str:
        """Changes whenever the examples of ``split`` would (for caching): the files' paths, sizes and times."""
        if directory is None:
            return f"hub:{self.hub_id}:{split}"
        return ";".join(file_key(p) for p in self.local_files(Path(directory), split))


READERS: dict[str, Reader] = {}


def register(reader: Reader) -> Reader:
    """Add ``reader`` to :data:`READERS` under its name (each family's reader modules call this on import)."""
    if reader.name in READERS and READERS[reader.name] != reader:
        raise ValueError(f"a reader named {reader.name!r} is already registered")
    READERS[reader.name] = reader
    return reader


def get_reader(name: str, family: type[Reader] = Reader, **options) -> Reader:
    """The registered reader ``name`` of ``family`` (a Reader subclass); ``options`` override its fields."""
    known = sorted(n for n, r in READERS.items() if isinstance(r, family))
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = (f"; did you mean data.dataset={close[0]}?" if close else "") + (
            " (a reader registers when its module is imported: a new reader's module is imported in its family's "
            "coda_exp/data/<family>/__init__.py, or, kept outside this package, named in imports=[your.module]: "
            "coda_exp/plugins.py, docs/layout.md)")
        raise DataError(f"unknown dataset {name!r} (data.dataset); known datasets: {known}{hint}")
    return replace(READERS[name], **options) if options else READERS[name]
