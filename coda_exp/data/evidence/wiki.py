"""The FEVER Wikipedia dump, indexed once into an on-disk sqlite store.

The dump (``wiki-pages/wiki-NNN.jsonl``) holds one page per line: ``id`` (the page title, ``_`` for spaces,
``-LRB-``/``-RRB-`` for brackets), ``text`` (the introduction) and ``lines``: one sentence per line,
``"<number>\\t<sentence>[\\t<link>...]"``, lines separated by ``"\\n"``. :func:`build_store` reads it once (with a
progress bar) into ``pages(id, text, lines)`` (``lines``: a JSON list, sentence ``n`` at position ``n``), so that a
claim's sentences are looked up by key instead of rereading 5.4M pages. Pages are looked up by their NFD-normalised
id (as the FEVER baseline's DrQA database keys them) and keep their title as written in the dump, which is what
retrieval returns (so that predicted pages compare equal to the claim files' gold pages). The page with an empty
``id`` that the release contains is skipped.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from coda_exp.data.common.base import fingerprint
from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import file_key, read_jsonl

WIKI_FOLDER = "wiki-pages"
PAGE_EXPECTED = 'one JSON page per line: {"id": str, "text": str, "lines": "0\\tsentence\\n1\\t..."}'


def normalize_page(page: str) -> str:
    return unicodedata.normalize("NFD", page)


def wiki_files(directory: str | os.PathLike) -> list[Path]:
    """The dump's ``wiki-pages/*.jsonl`` files in name order; a DataError when there is none."""
    folder = Path(directory) / WIKI_FOLDER
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        raise DataError(f"fever: no Wikipedia dump at {str(folder)!r}; expected {WIKI_FOLDER}/wiki-NNN.jsonl "
                        "(unzip wiki-pages.zip from https://fever.ai/dataset/fever.html into the data directory)")
    return files


def parse_lines(field: str, where: str) -> list[str]:
    """Sentence ``n`` of a page at position ``n`` (numbers the page skips are empty sentences)."""
    out: list[str] = []
    for raw in field.split("\n"):
        if not raw.strip():
            continue
        number, _, rest = raw.partition("\t")
        if not (number.isascii() and number.isdigit()):
            raise DataError(f"{where}: malformed 'lines' entry {raw[:60]!r}; expected '<number>\\t<sentence>...'")
        n = int(number)
        out.extend([""] * (n + 1 - len(out)))
        out[n] = rest.split("\t", 1)[0]
    return out


def read_pages(files: list[Path]) -> Iterator[tuple[str, str, list[str]]]:
    """``(page id as written, text, sentences)`` of every page of the dump files, validated line by line."""
    for path in files:
        for where, row in read_jsonl(path, expected=PAGE_EXPECTED):
            for key in ("id", "text", "lines"):
                if not isinstance(row.get(key), str):
                    raise DataError(f"{where}: missing or non-string field {key!r}; expected {PAGE_EXPECTED}")
            if row["id"]:
                yield row["id"], row["text"], parse_lines(row["lines"], where)


def store_path(directory: str | os.PathLike, cache_dir: str | os.PathLike) -> Path:
    """Where the store of the dump in ``directory`` lives: keyed by the dump files' paths, sizes and times."""
    key = fingerprint("fever-wiki-v2", [file_key(p) for p in wiki_files(directory)])
    return Path(cache_dir) / "fever" / f"wiki-{key}.sqlite"


def build_store(files: list[Path], out: Path, progress: bool = True) -> Path:
    """Write the sqlite store of the dump ``files`` to ``out`` (atomically: a temporary file, then renamed)."""
    from tqdm.auto import tqdm

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.execute("CREATE TABLE pages (id TEXT PRIMARY KEY, title TEXT, text TEXT, lines TEXT)")
        batch: list[tuple[str, str, str, str]] = []
        for page, text, lines in tqdm(read_pages(files), desc="indexing wiki pages", unit=" pages",
                                      disable=not progress):
            batch.append((normalize_page(page), page, text, json.dumps(lines, ensure_ascii=False)))
            if len(batch) >= 10000:
                con.executemany("INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?)", batch)
                batch = []
        con.executemany("INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?)", batch)
        con.commit()
    finally:
        con.close()
    os.replace(tmp, out)
    return out


class WikiStore:
    """Read access to a store built by :func:`build_store` (``open_store`` builds it when missing)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"fever: no Wikipedia store at {str(self.path)!r}; build it with "
                            "coda-exp fever-index (scripts/fever_index.py)")
        self.con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        try:  # a store cut short (a full disk) fails here, not at the first claim's evidence deep in training
            self.con.execute("SELECT id, lines FROM pages LIMIT 1").fetchall()
        except sqlite3.DatabaseError as e:
            self.con.close()
            raise DataError(f"{self.path}: not a readable Wikipedia store ({e}); delete it and run again (or "
                            "coda-exp fever-index): it is rebuilt from the dump") from None
        self._lines: dict[str, list[str] | None] = {}

    def __len__(self) -> int:
        return self.con.execute("SELECT COUNT(*) FROM pages").fetchone()[0]

    def lines(self, page: str) -> list[str] | None:
        """The sentences of ``page`` (None when the dump has no such page)."""
        page = normalize_page(page)
        if page not in self._lines:
            row = self.con.execute("SELECT lines FROM pages WHERE id = ?", (page,)).fetchone()
            if len(self._lines) > 100000:
                self._lines.clear()
            self._lines[page] = None if row is None else json.loads(row[0])
        return self._lines[page]

    def sentence(self, page: str, line: int) -> str | None:
        """Sentence ``line`` of ``page``, or None when the page or the sentence does not exist."""
        lines = self.lines(page)
        return lines[line] if lines is not None and 0 <= line < len(lines) else None

    def pages(self, batch: int = 10000) -> Iterator[list[tuple[str, str]]]:
        """Every ``(page title, text)``, in batches, in storage order."""
        cur = self.con.execute("SELECT title, text FROM pages ORDER BY rowid")
        while rows := cur.fetchmany(batch):
            yield rows

    def random_sentences(self, rng: random.Random, k: int) -> list[tuple[str, int]]:
        """``k`` ``(page, line)`` pairs of non-empty sentences of uniformly drawn pages (one sentence per page)."""
        top = self.con.execute("SELECT MAX(rowid) FROM pages").fetchone()[0] or 0
        out: list[tuple[str, int]] = []
        for _ in range(100 * k):
            if len(out) == k or top == 0:
                break
            row = self.con.execute("SELECT title, lines FROM pages WHERE rowid = ?", (rng.randint(1, top),)).fetchone()
            lines = json.loads(row[1]) if row else []
            filled = [i for i, s in enumerate(lines) if s.strip()]
            if filled:
                out.append((row[0], rng.choice(filled)))
        return out


def open_store(directory: str | os.PathLike, cache_dir: str | os.PathLike, progress: bool = True) -> WikiStore:
    """The store of the dump in ``directory``, built into ``cache_dir`` the first time."""
    path = store_path(directory, cache_dir)
    if not path.is_file():
        build_store(wiki_files(directory), path, progress)
    return WikiStore(path)
