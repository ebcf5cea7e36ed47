"""Yelp reviews, 5-way star rating (AttConv paper Table 3): the split of Lin et al. (2017) and the Yelp Dataset
Challenge's ``review.json`` from which a split of the same sizes is regenerated.

* The split files of Lin et al. (2017, "A Structured Self-attentive Sentence Embedding"): ``yelp_train_500k``,
  ``yelp_valid_2000``, ``yelp_test_2000`` (500,000 / 2,000 / 2,000 reviews), one review a line: ``<stars>
  <tokens ...>``, stars 1-5 (labels 0-4). These files are not public (the authors' loaders read them from their
  own disks); :func:`write_split` (``scripts/make_yelp_split.py``) writes files of the same names and format from
  ``review.json``. Order: the files' lines (blank lines skipped). Reviews shorter than ``min_words`` are dropped by
  the data module (``data.min_words``: Yin & Schütze's loader keeps only lines of more than 4 whitespace fields, the
  stars included, i.e. reviews of at least 4 words), and counted in its ``stats``.
* ``review.json`` of the Yelp Open Dataset / Dataset Challenge (https://www.yelp.com/dataset): JSON lines with
  ``review_id``, ``stars`` (1-5; an integer, or a float such as ``4.0`` in recent releases), ``text`` and other
  fields; read by :func:`read_reviews`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import read_jsonl
from coda_exp.data.common.readers import register
from coda_exp.data.common.vocab import tokenize
from coda_exp.data.text.readers import LineReader
from coda_exp.io import atomic_write

SPLIT_FILES = ("yelp_train_500k", "yelp_valid_2000", "yelp_test_2000")  # train, validation, test
STARS = ("1 star", "2 stars", "3 stars", "4 stars", "5 stars")
SOURCE_HINT = ("The split files of Lin et al. (2017) are not public: regenerate a 500K/2K/2K split from the Yelp "
               "Dataset Challenge's review.json (https://www.yelp.com/dataset) with coda-exp yelp-split "
               "--review-json PATH --out-dir data/yelp (python scripts/make_yelp_split.py in a checkout).")


@dataclass(frozen=True)
class YelpReader(LineReader):
    """The split files ``<stars> <tokens ...>`` (see the module docstring)."""

    line_format: str = "'<stars> <tokens ...>' (stars 1-5, a space, the tokenized review)"

    def file_names(self) -> tuple[str, str, str]:
        return SPLIT_FILES


YELP = register(YelpReader(name="yelp", hub_id=None, source_hint=SOURCE_HINT, label_names=STARS, label_offset=1))


def review_stars(value: object, where: str) -> int:
    """The star rating 1-5 of a review.json row (an int, or an integral float such as ``4.0``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 <= value <= 5 and value == int(value):
        return int(value)  # NaN and ±Infinity (JSON extensions) fail the range test before int() sees them
    raise DataError(f"{where}: unknown star rating {value!r}; expected an integer 1-5")


def read_reviews(path: str | Path) -> Iterator[tuple[str, int, str]]:
    """``(where, stars, text)`` of every review of a ``review.json`` file, in file order; a malformed line, a
    missing ``stars``/``text`` field, a rating outside 1-5 or an empty text is a DataError naming ``file:line``."""
    for where, row in read_jsonl(path, None, "one JSON review per line (review_id, stars, text, ...)"):
        missing = [k for k in ("stars", "text") if k not in row]
        if missing:
            raise DataError(f"{where}: review lacks the field(s) {', '.join(missing)}; expected a Yelp review.json "
                            "row (review_id, stars, text, ...)")
        text = row["text"]
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{where}: empty or non-string review text {str(text)[:40]!r}")
        yield where, review_stars(row["stars"], where), text


def split_line(stars: int, text: str) -> str:
    """A split-file line: the stars, then the review's tokens (:func:`coda_exp.data.common.vocab.tokenize`, case
    kept: words with inner hyphens/apostrophes and single punctuation marks), single spaces, no newline inside."""
    return " ".join([str(stars), *tokenize(text, lowercase=False)])


def choose(count: int, sizes: tuple[int, int, int], seed: int, source: str = "review.json") -> list[int]:
    """For each of ``count`` reviews, the split it goes to (0 train, 1 validation, 2 test) or -1: ``sum(sizes)``
    positions drawn without replacement with ``random.Random(seed)``, the first ``sizes[0]`` for train, etc."""
    if sum(sizes) > count:
        raise DataError(f"{source} holds {count} reviews, fewer than the {sum(sizes)} the split needs "
                        f"({' + '.join(map(str, sizes))})")
    drawn = random.Random(seed).sample(range(count), sum(sizes))
    out = [-1] * count
    bounds = [0, sizes[0], sizes[0] + sizes[1], sum(sizes)]
    for split in range(3):
        for pos in drawn[bounds[split]:bounds[split + 1]]:
            out[pos] = split
    return out


def write_split(review_json: str | Path, out_dir: str | Path, sizes: tuple[int, int, int] = (500_000, 2000, 2000),
                seed: int = 1234, progress: Callable[[Iterator, int], Iterator] | None = None) -> list[Path]:
    """Write ``yelp_train_500k``, ``yelp_valid_2000`` and ``yelp_test_2000`` into ``out_dir`` from ``review.json``:
    a random ``sizes`` split of its reviews (:func:`choose`), each file in review.json's order, every line
    :func:`split_line`. Two passes over the file (count and validate, then write); each output is written
    atomically. The same file, sizes and seed give the same files. ``progress(iterator, total)`` may wrap the
    passes (a progress bar). Returns the written paths."""
    review_json, out_dir = Path(review_json), Path(out_dir)
    if review_json.is_dir():
        raise DataError(f"{review_json}: is a directory; expected the Yelp Dataset Challenge's review.json file "
                        "(JSON lines) in it or elsewhere")
    if not review_json.is_file():  # here, not when the first pass reads it: after its progress bar has started
        raise DataError(f"{review_json}: no such file (the Yelp Dataset Challenge's review.json)")
    wrap = progress or (lambda it, total: it)
    count = sum(1 for _ in wrap(read_reviews(review_json), None))
    where = choose(count, sizes, seed, str(review_json))
    paths = [out_dir / name for name in SPLIT_FILES]
    with atomic_write(paths[0]) as train, atomic_write(paths[1]) as valid, atomic_write(paths[2]) as test:
        files = (train, valid, test)
        for k, (_, stars, text) in enumerate(wrap(read_reviews(review_json), count)):
            if where[k] >= 0:
                files[where[k]].write(split_line(stars, text) + "\n")
    return paths

