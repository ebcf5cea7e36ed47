"""The one way to read an official data file: UTF-8 (a byte-order mark tolerated), line by line, with errors that
name the file, the line and the split.

Bytes that are not UTF-8 are a :class:`DataError` naming ``file:line`` (the line the bad byte is on); a file with
nothing but whitespace is a :class:`DataError` naming the file and the split it was read for, and saying what the
file should hold. Lines are split on ``"\\n"`` only and a trailing ``"\\r"`` is dropped, so line numbers agree with
``wc -l`` and with editors. ``.gz`` files are decompressed on the fly.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from coda_exp.data.common.errors import DataError, odd_entry, os_reason

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # dialogue contexts (UDC) can be long


def of_split(split: str | None) -> str:
    """`` (read for the validation split)`` or nothing: appended to messages about a file."""
    return f" (read for the {split} split)" if split else ""


def _open_binary(path: Path, split: str | None = None):
    """``path`` opened for reading bytes (gzip decompressed); a DataError naming it where it is not a readable
    regular file (a folder, a broken link, a named pipe, permission denied)."""
    try:
        if path.is_dir():
            raise DataError(f"{path}: is a directory, not a file{of_split(split)}")
        if not path.is_file():
            raise DataError(f"{path}: {odd_entry(path) or 'no such file'}{of_split(split)}")
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({os_reason(e)}){of_split(split)}; expected a file this user can "
                        f"read (ls -l {path})") from None


def _decode(raw: bytes, path: Path, lineno: int, split: str | None) -> str:
    try:
        return raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{lineno}: byte {raw[e.start:e.start + 1]!r} at column {e.start + 1} is not UTF-8 "
                        f"({e.reason}){of_split(split)}; expected UTF-8 text") from None


def numbered(f, failed: Callable[[BaseException, int], Exception]) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of the open binary file ``f``; an error while reading (a disk error, a cut-short
    or damaged .gz) is raised as ``failed(error, the last line read)``, a user's DataError, not a traceback."""
    lineno = 0
    lines = enumerate(f, 1)
    while True:
        try:
            lineno, raw = next(lines)
        except StopIteration:
            return
        except (OSError, EOFError, zlib.error) as e:
            raise failed(e, lineno) from None
        yield lineno, raw


def iter_lines(path: str | os.PathLike, split: str | None = None, expected: str = "text") -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for every line of ``path`` (newline and ``\\r`` removed, blank lines included).

    ``expected`` says in words what the file should hold (for the empty-file message).
    """
    path = Path(path)
    blank = True

    def failed(e: BaseException, lineno: int) -> DataError:
        if isinstance(e, (EOFError, gzip.BadGzipFile, zlib.error)):  # a truncated archive, or not gzip at all
            return DataError(f"{path}: cannot decompress after line {lineno} ({type(e).__name__}: {e})"
                             f"{of_split(split)}; expected a complete gzip file (re-download or re-compress it)")
        return DataError(f"{path}: cannot be read after line {lineno} ({os_reason(e)}){of_split(split)}")

    with _open_binary(path, split) as f:
        for lineno, raw in numbered(f, failed):
            line = _decode(raw, path, lineno, split).rstrip("\n").rstrip("\r")
            blank = blank and not line.strip()
            yield lineno, line
    if blank:
        raise DataError(f"{path}: empty file{of_split(split)}; expected {expected}")


def iter_records(path: str | os.PathLike, split: str | None = None, expected: str = "text"
                 ) -> Iterator[tuple[str, str]]:
    """``(where, line)`` for every non-blank line of ``path`` (``where`` = ``file:line``, for error messages),
    with the checks of :func:`iter_lines`."""
    for lineno, line in iter_lines(path, split, expected):
        if line.strip():
            yield f"{path}:{lineno}", line


def read_lines(path: str | os.PathLike, split: str | None = None, expected: str = "text") -> list[str]:
    """All lines of ``path`` (see :func:`iter_lines`); a missing final newline adds no empty line."""
    return [line for _, line in iter_lines(path, split, expected)]


def read_text(path: str | os.PathLike, split: str | None = None, expected: str = "text") -> str:
    """The whole of ``path`` decoded (lines joined by ``"\\n"``), with the checks of :func:`iter_lines`."""
    return "\n".join(read_lines(path, split, expected))


def read_jsonl(path: str | os.PathLike, split: str | None = None, expected: str = "one JSON object per line",
               hint: str | None = None) -> Iterator[tuple[str, dict]]:
    """``(where, object)`` for each non-blank line of a JSON-lines file (``where`` = ``file:line``); a malformed
    line or one that is not an object is a :class:`DataError` naming ``file:line`` (and ``hint``, what to do)."""
    for where, line in iter_records(path, split, expected):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: malformed JSON line ({e.msg}); {hint or 'expected one JSON object'}") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}" + (f"; {hint}" if hint else ""))
        yield where, row


def read_table(path: str | os.PathLike, split: str | None = None, expected: str = "a header line",
               delimiter: str = ",", quoting: int = csv.QUOTE_MINIMAL) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """The header (fields stripped) and the non-blank rows ``(line number where the row ends, fields)`` of a CSV
    (``delimiter=","``) or TSV (``delimiter="\t"``, ``quoting=csv.QUOTE_NONE``) file; quoted fields may span
    lines. A row with another number of fields than the header is a :class:`DataError` naming ``file:line``, the
    line the row begins on (and, when it spans lines, where it ends: a stray quote runs to the next one)."""
    rows = csv.reader((line + "\n" for _, line in iter_lines(path, split, expected)), delimiter=delimiter,
                      quoting=quoting)

    def next_row() -> tuple[int, list[str]] | None:
        start = rows.line_num + 1
        try:
            return start, next(rows)
        except StopIteration:
            return None
        except csv.Error as e:
            raise DataError(f"{path}:{start}: malformed CSV row ({e}){of_split(split)}") from None

    header = [h.strip() for h in next_row()[1]]

    def body() -> Iterator[tuple[int, list[str]]]:
        while (item := next_row()) is not None:
            start, row = item
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                span = (f" (it runs to line {rows.line_num}: an unclosed quote on line {start}?)"
                        if rows.line_num > start else "")
                if len(row) == 1 and not span and delimiter == "\t":  # commas in a .tsv file
                    span = " (the row has no tab: the file must be tab-separated, as its header is)"
                raise DataError(f"{path}:{start}: malformed row with {len(row)} fields; expected "
                                f"{len(header)} ({', '.join(header)}){span}")
            yield rows.line_num, row

    return header, body()


def file_key(path: Path) -> str:
    """Changes whenever the file (or a folder's files) changes: resolved path, size and modification time."""
    if path.is_dir():  # a split stored as a folder of files (TrecQA's a.toks/b.toks/sim.txt/id.txt)
        return ";".join(file_key(p) for p in sorted(path.iterdir()) if p.is_file())
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
