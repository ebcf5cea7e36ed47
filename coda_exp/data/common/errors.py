"""Errors raised for bad or missing data: each message names the file, line or key and what was expected."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from coda_exp.errors import UserError


class DataError(UserError, ValueError):
    """A dataset could not be read: missing files, a malformed row, an unknown label."""


def os_reason(err: OSError) -> str:
    """``err`` in a few words for a message: ``permission denied``, ``input/output error`` (its errno's text)."""
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return (err.strerror or str(err) or type(err).__name__).lower()


def odd_entry(path: Path) -> str | None:
    """What ``path`` is, where something is there but neither a regular file nor a folder (links followed): ``is a
    broken symbolic link (-> 'x', which does not exist)``, ``is a symbolic link that loops (-> 'x': ...)``, ``is a named
    pipe (FIFO), not a regular file``; None where it is a file, a folder, or nothing at all."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be examined ({os_reason(e)})"
    link = ""
    if stat.S_ISLNK(mode):
        try:
            link = f"-> {os.readlink(path)!r}"
        except OSError as e:
            link = f"its target cannot be read: {os_reason(e)}"
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            if e.errno == errno.ELOOP:
                return f"is a symbolic link that loops ({link}: to itself, or through a cycle of links), not a file"
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                return f"is a broken symbolic link ({link}, which does not exist)"
            return f"is a symbolic link ({link}) that cannot be followed ({os_reason(e)})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
    return f"is {f'a symbolic link ({link}) to ' if link else ''}{kind}, not a regular file"


def unreadable(path: Path) -> str | None:
    """``cannot be read (permission denied)`` where opening the regular file ``path`` (listing the folder) fails,
    else None (also for anything else: :func:`odd_entry` says what that is). Opened, never read: cheap."""
    try:
        if path.is_dir():
            with os.scandir(path):
                return None
        if path.is_file():
            with open(path, "rb"):
                return None
    except OSError as e:
        return f"cannot be read ({os_reason(e)})"
    return None


def not_a_folder(directory: Path) -> str | None:
    """What is wrong with ``directory`` as a data folder (``is a file, not a folder``, ``does not exist``, ``is a
    broken symbolic link (...)``, ``cannot be read (permission denied)``), or None when it is a folder."""
    try:
        if directory.is_dir():
            return unreadable(directory)
        if directory.is_file():
            return "is a file, not a folder"
    except OSError as e:  # a folder above it that cannot be searched
        return f"cannot be examined ({os_reason(e)})"
    odd = odd_entry(directory)
    return odd.replace("not a regular file", "not a folder").replace(", not a file", ", not a folder") if odd \
        else "does not exist"


def require_files(name: str, directory: str | os.PathLike, needed: Iterable[str], expected: Iterable[str],
                  hint: str = "") -> Path:
    """``directory`` as a Path, or a DataError naming what it lacks, every file expected there and where to get
    them (``hint``). ``needed``: the files this call reads; ``expected``: all the benchmark's files."""
    directory = Path(directory)
    tail = f"Expected the official files {', '.join(expected)} in it. {hint}".rstrip()
    if (problem := not_a_folder(directory)) is not None:
        raise DataError(f"{name}: data directory {str(directory)!r} {problem}. {tail}")
    odd = next(((f, what) for f in needed if (what := odd_entry(directory / f))), None)
    if odd is not None:  # there, but not a file: "lacks" would send the user looking for a download
        raise DataError(f"{name}: {directory / odd[0]} {odd[1]}; expected the official file {odd[0]} there "
                        f"(replace it with the file itself). {tail}")
    folders = [f for f in needed if (directory / f).is_dir()]
    if folders:
        raise DataError(f"{name}: {', '.join(str(directory / f) for f in folders)} "
                        f"{'is a directory' if len(folders) == 1 else 'are directories'}, not a file. {tail}")
    missing = [f for f in needed if not (directory / f).is_file()]
    if missing:  # the other splits' missing files too: the whole download is named at once, not split by split
        others = [f for f in expected if f not in needed and not (directory / f).exists()]
        also = f" (and {', '.join(others)}, which other splits read)" if others else ""
        raise DataError(f"{name}: data directory {str(directory)!r} lacks {', '.join(missing)}{also}"
                        f"{did_you_mean(directory, needed)}. {tail}")
    for f in needed:  # opened here, before any run starts, not first when the datasets library reads it
        require_readable(name, directory / f)
    return directory


def require_readable(name: str, path: Path, files_inside: bool = False) -> Path:
    """``path``, or a DataError naming it where this user cannot open it (a file) or list it (a folder); with
    ``files_inside``, the regular files just inside the folder too (TrecQA's ``a.toks``, ``b.toks``, ...)."""
    paths = [path]
    if files_inside and path.is_dir() and unreadable(path) is None:
        paths += sorted(p for p in path.iterdir() if p.is_file())
    for p in paths:
        if (why := unreadable(p)) is not None:
            raise DataError(f"{p}: {why}; {name} reads it: make it readable to this user (ls -l {p})")
    return path


def did_you_mean(directory: Path, needed: Iterable[str]) -> str:
    """`` (did you mean data.dir=<sub>? it holds them)`` where a folder just inside ``directory`` holds every file of
    ``needed`` (``data.dir=/tmp/parent`` for the files of ``/tmp/parent/snli_1.0/``: the zip's folder), else empty."""
    needed = list(needed)
    try:
        subs = sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError:
        return ""
    found = next((p for p in subs if needed and all((p / f).is_file() for f in needed)), None)
    return "" if found is None else f" (did you mean data.dir={found}? it holds them)"
