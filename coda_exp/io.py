"""Writing files atomically: every file the project writes (records, tables, predictions, checkpoints, caches)
goes through :func:`atomic_write`, so a reader sees the old file or the complete new one, never a partial write."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """``with atomic_write(path) as f: f.write(...)``: a temporary file in the target's folder, flushed and
    fsynced, then renamed over ``path`` (and the folder entry fsynced). On any error the temporary file is removed
    and ``path`` is left untouched; an OSError that names no file (a write to a full disk) is raised naming
    ``path``. ``mode`` is ``"w"`` (text, ``encoding``) or ``"wb"`` (bytes)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the file gets what open() would have given it
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": encoding, "newline": ""})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError) and err.errno is not None and err.filename is None:  # a failed write (a full
            # disk) names no file: this one
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` with :func:`atomic_write`; returns the path."""
    with atomic_write(path) as fh:
        fh.write(text)
    return Path(path)


def output_problem(flag: str, path: str | os.PathLike, what: str, *, folder: bool,
                   example: str | None = None) -> str | None:
    """Why ``path``, a command's ``flag`` argument, cannot take ``what`` (a folder to write files into with
    ``folder``, else one file), naming the argument and what it expects; None when it can (the folders to create may
    not exist yet); ``example``: a file name to suggest inside a folder given for a file. Checked before a command reads its input, instead of a FileExistsError or IsADirectoryError
    traceback after."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        return f"{flag} {path}: a file, not a folder; expected a folder to write {what} into"
    if not folder and path.is_dir():
        return (f"{flag} {path}: a folder; expected the file to write {what} to"
                + (f" (e.g. {flag} {path / example})" if example else ""))
    above = next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)
    if above is not None and not above.is_dir():
        return f"{flag} {path}: {above} is a file, not a folder; expected a path whose folders are folders"
    return None


def write_problem(flag: str, path: str | os.PathLike, what: str, err: OSError) -> str:
    """The one line for a write of ``what`` to ``flag``'s ``path`` that failed with ``err`` (no permission, a full
    disk: what to free)."""
    from coda_exp.errors import full_disk, what_to_free

    fix = f": {what_to_free(err)}" if full_disk(err) else ""
    return f"{flag} {path}: cannot write {what}: {err.strerror or err}{fix}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    """Persist the directory entry of a renamed file (best effort; not supported on every OS)."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
