"""Reading a word-vectors text file (GloVe, or word2vec's text format): its layout, then its lines, checked.

GloVe files have no header; word2vec text files start with ``<count> <dim>``. Either may be gzip-compressed (read
by its magic bytes, whatever its name). The vector size is the header's, or else the most common count of numbers
that end the first :data:`SAMPLE` lines (a header or a first line with a number too many or too few would
otherwise turn every later line into a multi-word token). GloVe 840B contains a few tokens with spaces
(``. . .``, ``at name@domain.com``), so the vector is the last ``dim`` fields of a line and the rest is the word; a
line whose field before its vector is a number too has more numbers than the dimension and is an error naming
``file:line``, as is one with fewer, and a component that is ``nan`` or ``inf`` in a line that is read. Bytes that
are not UTF-8 after the first line are replaced, counted and reported once, naming the first such line.
"""

from __future__ import annotations

import gzip
import logging
import math
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coda_exp.data.common.errors import DataError, odd_entry, os_reason
from coda_exp.data.common.files import numbered

log = logging.getLogger(__name__)

SAMPLE = 20  # lines after the header from which a GloVe file's dimension is inferred (and a header checked)
OPTION = "data.embeddings.path"
EXPECTED = "a GloVe or word2vec text file (a word and its numbers, separated by single spaces, a line)"


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def trailing_numbers(parts: list[str]) -> int:
    """How many fields end ``parts`` that are numbers, the first field (the word, even ``2013``) excepted."""
    n = 0
    while n < len(parts) - 1 and _is_number(parts[-1 - n]):
        n += 1
    return n


def cannot_read(path: Path, err: OSError | EOFError | zlib.error, after: int | None = None) -> DataError:
    """The DataError of an embeddings file that cannot be opened (or read ``after`` a line): permission denied, a
    disk error, a cut-short or damaged gzip file."""
    where = f" after line {after}" if after else ""
    why = os_reason(err) if isinstance(err, OSError) and err.errno else f"{type(err).__name__}: {err}"
    return DataError(f"embeddings file {str(path)!r} cannot be read{where} ({why}); set {OPTION} to {EXPECTED} "
                     f"that this user can read, complete (a .gz file: not cut short) (ls -l {path})")


def _open(path: Path):
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
        return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")
    except OSError as e:
        raise cannot_read(path, e) from None


def _numbered(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of ``path`` (:func:`_open`); an OSError while reading is a DataError."""
    with _open(path) as f:
        yield from numbered(f, lambda e, lineno: cannot_read(path, e, lineno))  # a disk error, a cut-short .gz


@dataclass
class VectorsFile:
    """A checked vectors file: ``path``, ``dim``, the word2vec header's ``count`` (None for GloVe) and where the
    dimension came from (``dim_source``, for messages)."""

    path: Path
    dim: int
    count: int | None
    dim_source: str

    @classmethod
    def open(cls, path) -> VectorsFile:
        """The layout of ``path``: a DataError naming it (and the line) when it is missing, a directory, binary,
        empty, tab-separated or has no consistent vector size."""
        path = Path(path)
        if path.is_dir():
            raise DataError(f"embeddings file {str(path)!r} is a directory; set {OPTION} to {EXPECTED}")
        if not path.is_file():
            raise DataError(f"embeddings file {str(path)!r} {(odd_entry(path) or 'does not exist')}; set {OPTION} "
                            "to a GloVe or word2vec text file, or null for random initialisation")
        if path.suffix == ".bin":
            raise DataError(f"{path}: binary word2vec (.bin) is not supported ({OPTION}); convert it to the text "
                            "format first (gensim: KeyedVectors.load_word2vec_format(path, binary=True)"
                            ".save_word2vec_format(out, binary=False))")
        head: list[tuple[int, list[str]]] = []
        header = None
        for lineno, raw in _numbered(path):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8", errors="strict" if lineno == 1
                                  else "replace")
            except UnicodeDecodeError:
                raise DataError(f"{path}:1: not UTF-8 text; expected {EXPECTED} ({OPTION}); binary word2vec "
                                "(.bin) is not supported, convert it to the text format first") from None
            parts = line.rstrip().split(" ")
            if not line.strip():
                continue
            if lineno == 1 and len(parts) == 2 and all(p.isascii() and p.isdigit() for p in parts):
                header = (int(parts[0]), int(parts[1]))
                continue
            head.append((lineno, parts))
            if len(head) == SAMPLE:
                break
        if not head:
            raise DataError(f"{path}: {'a word2vec header and no vector' if header else 'empty file'}; "
                            f"expected {EXPECTED} ({OPTION})")
        counts = Counter(trailing_numbers(parts) for _, parts in head)
        dim = counts.most_common(1)[0][0]  # ties: the count seen first
        lines = f"line{'s' if len(head) > 1 else ''} {head[0][0]}" + (f"-{head[-1][0]}" if len(head) > 1 else "")
        if dim < 1:
            tabs = any("\t" in " ".join(parts) for _, parts in head)
            what = ("fields separated by tabs" if tabs else "binary data after a word2vec header (a .bin file?)" if
                    header else "no numbers after the word")
            raise DataError(f"{path}:{head[0][0]}: {what}; expected {EXPECTED} ({OPTION})")
        if header is not None:
            if header[1] != dim:
                raise DataError(f"{path}:1: the word2vec header says {header[0]} vectors of dimension {header[1]}, "
                                f"but most of {lines} have {dim} numbers after the word; fix the header "
                                f"({OPTION})")
            return cls(path, dim, header[0], "the word2vec header's dimension")
        return cls(path, dim, None, f"the dimension most of {lines} have")

    def lines(self) -> Iterator[tuple[int, str, str]]:
        """``(line number, word, tail)`` of each vector line, ``tail`` the text of its ``dim`` numbers (parse it
        with :meth:`vector`); the count of numbers and their finiteness are checked on every line."""
        dim = self.dim
        bad_bytes, first_bad = 0, 0
        for lineno, raw in _numbered(self.path):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                bad_bytes += 1
                first_bad = first_bad or lineno
            if lineno == 1 and self.count is not None or not line.strip():
                continue
            line = line.rstrip()
            parts = line.split(" ")
            if (len(parts) < dim + 1 or not _is_number(parts[-dim])
                    or len(parts) > dim + 1 and _is_number(parts[-dim - 1])):
                n = trailing_numbers(parts)
                raise DataError(f"{self.path}:{lineno}: {n} number{'s' if n != 1 else ''} after the word "
                                f"{' '.join(parts[:len(parts) - n])!r}, expected {dim} ({self.dim_source}); "
                                f"is the file damaged? ({OPTION})")
            word_len = len(parts) - dim
            word = " ".join(parts[:word_len])
            tail = line[len(word) + 1:]
            if "n" in tail or "N" in tail:  # nan, inf, Infinity: float() reads no other spelling with an n
                self.vector(lineno, word, tail)
            yield lineno, word, tail
        if bad_bytes:
            log.warning("%s:%d: %d line(s) of the embeddings file hold bytes that are not UTF-8 (replaced; the first "
                        "on line %d); words on them will not match the vocabulary", self.path, first_bad, bad_bytes,
                        first_bad)

    def vector(self, lineno: int, word: str, tail: str) -> list[float]:
        """The numbers of a line (``tail``): a DataError naming ``file:line`` for one that is not a finite
        number."""
        fields = tail.split(" ")
        try:
            values = [float(x) for x in fields]
        except ValueError:
            bad = next(i for i, x in enumerate(fields) if not _is_number(x))
            raise DataError(f"{self.path}:{lineno}: component {bad + 1} of the vector of {word!r} is "
                            f"{fields[bad][:40]!r}, not a number (expected {self.dim} numbers after the word; "
                            f"{OPTION})") from None
        if len(values) != self.dim:
            raise DataError(f"{self.path}:{lineno}: {len(values)} vector components for {word!r} (two spaces in "
                            f"a row?), expected {self.dim}")
        bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
        if bad is not None:
            raise DataError(f"{self.path}:{lineno}: component {bad + 1} of the vector of {word!r} is "
                                f"{values[bad]} (expected a finite number; {OPTION})")
        return values
