"""Sentiment benchmarks of CoDA paper Table 5: IMDb and SST (binary SST-2 and fine-grained SST-5); Yelp (AttConv
Table 3) is in :mod:`coda_exp.data.text.yelp`, on the :class:`LineReader` base defined here.

Every reader yields ``{"text", "label", "index"}`` (``index``: position in the split, in the deterministic
order documented per reader). Local files are validated line by line / file by file and errors name the file
(and line); without a directory the hub dataset is read where one exists.

* IMDb (Maas et al. 2011, https://ai.stanford.edu/~amaas/data/sentiment/): ``aclImdb/{train,test}/{neg,pos}/
  <id>_<rating>.txt``; ``dir`` is the ``aclImdb`` folder itself or its parent. Labels neg = 0, pos = 1 (the hub's
  too). Order: ``neg`` then ``pos``, files by numeric id. ``<br />`` tags become spaces. The official release
  has no validation set: ``val_fraction`` (default 10%, i.e. 2,500 reviews) of each class of ``train`` is held
  out with a fixed seed (``split_seed``, the same for every run seed) and used for validation; training uses
  the rest. ``val_fraction=0`` reproduces Tensor2Tensor's ``sentiment_imdb`` protocol instead: train on all
  25,000 training reviews and use the test set as the evaluation (validation) split. Hub: ``imdb``.
* SST (Socher et al. 2013) in the sentence-level split of Kim (2014, "Convolutional Neural Networks for Sentence
  Classification"), whose preprocessing (lower-cased, PTB-tokenized sentences, one per line as ``<label>
  <sentence>``; neutral sentences removed for the binary task) is distributed as ``stsa.binary.{train,dev,test}``
  (6,920 / 872 / 1,821 sentences, labels 0-1) and ``stsa.fine.{train,dev,test}`` (8,544 / 1,101 / 2,210, labels
  0-4) with Kim's CNN code and its re-implementations. Hub: ``sst2`` (GLUE SST-2) for the binary task only; its
  test labels are hidden, so the hub's validation split (the same 872 dev sentences) doubles as the test split
  and a warning says so. Note that GLUE SST-2 trains on 67,349 phrases and sentences (what Tensor2Tensor's
  ``sentiment_sst_binary`` uses, evaluating on the dev set), the stsa files on 6,920 sentences. SST-5 is read
  from files only.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coda_exp.data.common.errors import DataError, not_a_folder, require_files, require_readable
from coda_exp.data.common.files import iter_records, read_text
from coda_exp.data.common.readers import Reader, get_reader, register
from coda_exp.data.common.splits import SPLITS

_BR_RE = re.compile(r"<br\s*/?>", re.IGNORECASE)
_IMDB_NAME_RE = re.compile(r"^([0-9]+)_([0-9]+)\.txt$")


def clean_imdb(text: str) -> str:
    """``<br />`` line breaks -> spaces; surrounding whitespace stripped."""
    return _BR_RE.sub(" ", text).strip()


def held_out(labels: list[int], fraction: float, seed: int) -> set[int]:
    """Positions of a stratified held-out slice: ``round(fraction * n_c)`` (at least 1) of each class ``c``."""
    if fraction <= 0:
        return set()
    rng = random.Random(seed)
    out: set[int] = set()
    for c in sorted(set(labels)):
        pos = [i for i, y in enumerate(labels) if y == c]
        out.update(rng.sample(pos, min(len(pos), max(1, round(fraction * len(pos))))))
    return out


@dataclass(frozen=True)
class TextReader(Reader):
    """A single-text classification benchmark: ``read_local`` / ``read_hub`` yield ``(text, label)`` pairs,
    :meth:`read` numbers them (``{"text", "label", "index"}``)."""

    label_names: tuple[str, ...] = ()

    def read(self, split: str, directory: str | os.PathLike | None = None) -> Iterator[dict]:
        for i, (text, label) in enumerate(super().read(split, directory)):
            yield {"text": text, "label": label, "index": i}

    label_offset: int = 0  # the files' label of class 0 (Yelp's stars: 1)

    def label_id(self, label: str, where: str) -> int:
        """Class id of the file's ``label`` (an integer ``label_offset`` .. ``label_offset + classes - 1``)."""
        if label.isascii() and label.isdigit() and 0 <= int(label) - self.label_offset < len(self.label_names):
            return int(label) - self.label_offset
        raise DataError(f"{where}: unknown label {label!r} for {self.name}; expected an integer "
                        f"{self.label_offset}-{self.label_offset + len(self.label_names) - 1} "
                        f"({', '.join(self.label_names)})")

    def notes(self, directory: str | os.PathLike | None) -> list[str]:
        """Protocol deviations worth recording with a run (e.g. a split standing in for another)."""
        return []

    @abstractmethod
    def read_local(self, directory: Path, split: str) -> Iterator[tuple[str, int]]:
        """(text, label) pairs of one split, validated."""


@dataclass(frozen=True)
class ImdbReader(TextReader):
    val_fraction: float = 0.1
    split_seed: int = 0

    def layout(self) -> str:
        return "aclImdb/{train,test}/{neg,pos}/*.txt (or the aclImdb folder itself)"

    def root(self, directory: str | os.PathLike, part: str | None = None) -> Path:
        """The ``aclImdb`` folder, holding ``part``'s folders (``train`` or ``test``; None: both)."""
        d = Path(directory)
        if (problem := not_a_folder(d)) is not None:
            raise DataError(f"{self.name}: data directory {str(directory)!r} {problem}; expected {self.layout()}. "
                            f"{self.source_hint}")
        if (d / "aclImdb").is_dir():
            d = d / "aclImdb"
        wanted = [f"{s}/{c}" for s in ((part,) if part else ("train", "test")) for c in ("neg", "pos")]
        missing = [w for w in wanted if not (d / w).is_dir()]
        if missing:
            raise DataError(f"{self.name}: data directory {str(directory)!r} lacks the folder(s) "
                            f"{', '.join(missing)}; expected {self.layout()}. {self.source_hint}")
        return d

    def files(self, root: Path, part: str) -> list[tuple[Path, int]]:
        """The reviews of ``train`` or ``test``: neg then pos, each by numeric id (then name)."""
        out = []
        for label, cls in enumerate(("neg", "pos")):
            folder = root / part / cls
            listed = require_readable(self.name, folder).iterdir()
            names = [p.name for p in listed if p.suffix == ".txt" and p.is_file()]
            if not names:
                raise DataError(f"{self.name}: folder {folder} holds no *.txt review; expected {self.layout()}")
            key = (lambda n: (0, int(m.group(1)), n) if (m := _IMDB_NAME_RE.match(n)) else (1, 0, n))
            out += [(folder / n, label) for n in sorted(names, key=key)]
        return out

    def _select(self, items: list, labels: list[int], split: str) -> list:
        if split == "test":
            return items
        hold = held_out(labels, self.val_fraction, self.split_seed)
        if split == "validation":
            return items if not hold else [x for i, x in enumerate(items) if i in hold]
        return [x for i, x in enumerate(items) if i not in hold]

    def _part(self, split: str) -> str:
        return "test" if split == "test" or (split == "validation" and self.val_fraction <= 0) else "train"

    def local_files(self, directory: Path, split: str) -> list[Path]:
        root = self.root(directory, self._part(split)) / self._part(split)
        return [require_readable(self.name, root / "neg"), require_readable(self.name, root / "pos")]

    def read_local(self, directory: Path, split: str) -> Iterator[tuple[str, int]]:
        files = self.files(self.root(directory, self._part(split)), self._part(split))
        for path, label in self._select(files, [y for _, y in files], split):
            text = clean_imdb(read_text(path, split, "the review text"))
            if not text:
                raise DataError(f"{path}: empty review; expected the review text")
            yield text, label

    def read_hub(self, split: str) -> Iterator[tuple[str, int]]:
        import datasets

        ds = datasets.load_dataset(self.hub_id, split=self._part(split))
        rows = [(clean_imdb(t), int(y)) for t, y in zip(ds["text"], ds["label"])]
        yield from self._select(rows, [y for _, y in rows], split)

    def source_key(self, split: str, directory: str | os.PathLike | None) -> str:
        proto = f"{self._part(split)}:{self.val_fraction}:{self.split_seed}"
        if directory is None:
            return f"hub:{self.hub_id}:{split}:{proto}"
        h = hashlib.sha1()
        for path, label in self.files(self.root(directory, self._part(split)), self._part(split)):
            st = path.stat()
            h.update(f"{path.name}:{label}:{st.st_size}:{st.st_mtime_ns};".encode())
        return f"{Path(directory).resolve()}:{split}:{proto}:{h.hexdigest()}"

    def notes(self, directory: str | os.PathLike | None) -> list[str]:
        if self.val_fraction <= 0:
            return [("imdb: val_fraction=0, so validation = the test set (Tensor2Tensor's protocol); model "
                    "selection and early stopping then see the test set")]
        return []


@dataclass(frozen=True)
class LineReader(TextReader):
    """One example a line, ``<label> <text>`` (one space after the label; blank lines skipped), one file a split:
    :meth:`file_names` in the order train, validation, test."""

    line_format: str = "'<label> <sentence>' (an integer label, a space, the tokenized sentence)"

    @abstractmethod
    def file_names(self) -> tuple[str, str, str]:
        """The files of train, validation and test."""

    def layout(self) -> str:
        return ", ".join(self.file_names())

    def path(self, directory: Path, split: str) -> Path:
        names = list(self.file_names())
        needed = [names[SPLITS.index(split)]]
        return require_files(self.name, directory, needed, names, self.source_hint) / needed[0]

    def local_files(self, directory: Path, split: str) -> list[Path]:
        return [self.path(directory, split)]

    def read_local(self, directory: Path, split: str) -> Iterator[tuple[str, int]]:
        path = self.path(directory, split)
        for where, line in iter_records(path, split, f"one {self.line_format.split(' (')[0]} per line"):
            parts = line.strip().split(None, 1)
            if len(parts) < 2:  # a label and no text (an empty text is refused, as by every reader), or a text alone
                what = (f"no text after the label {parts[0]!r}" if parts[0].isascii() and parts[0].isdigit() else
                        f"malformed line {line[:60]!r}")
                raise DataError(f"{where}: {what}; expected {self.line_format}")
            yield parts[1].strip(), self.label_id(parts[0], where)


@dataclass(frozen=True)
class SstReader(LineReader):
    prefix: str = "stsa.binary"
    hub_splits: tuple[tuple[str, str], ...] = ()

    def file_names(self) -> tuple[str, str, str]:
        return tuple(f"{self.prefix}.{s}" for s in ("train", "dev", "test"))

    def read_hub(self, split: str) -> Iterator[tuple[str, int]]:
        import datasets

        ds = datasets.load_dataset(self.hub_id, split=dict(self.hub_splits).get(split, split))
        for sentence, label in zip(ds["sentence"], ds["label"]):
            yield sentence.strip(), int(label)

    def notes(self, directory: str | os.PathLike | None) -> list[str]:
        if directory is None and dict(self.hub_splits).get("test") == "validation":
            return [(f"{self.name}: the hub dataset {self.hub_id!r} has no test labels, so the test split is its "
                    "validation split (GLUE SST-2 dev, 872 sentences), as in Tensor2Tensor's sentiment_sst_binary")]
        return []


_SST_HINT = ("The stsa files are Kim (2014)'s sentence-level SST preprocessing (one '<label> <tokenized sentence>' "
             "per line), distributed with his CNN sentence-classification code and its re-implementations.")

for _reader in (
    ImdbReader(
        name="imdb", label_names=("neg", "pos"), hub_id="imdb",
        source_hint="Get aclImdb_v1.tar.gz from https://ai.stanford.edu/~amaas/data/sentiment/ and extract it.",
    ),
    SstReader(
        name="sst2", label_names=("negative", "positive"), hub_id="sst2", source_hint=_SST_HINT,
        prefix="stsa.binary", hub_splits=(("train", "train"), ("validation", "validation"), ("test", "validation")),
    ),
    SstReader(
        name="sst5", label_names=("very negative", "negative", "neutral", "positive", "very positive"),
        hub_id=None, source_hint=_SST_HINT, prefix="stsa.fine",
    ),
):
    register(_reader)


def get_text_reader(name: str, **options) -> TextReader:
    """The reader of ``name`` (imdb, sst2, sst5, yelp); ``options`` override its fields (e.g. ``val_fraction``)."""
    return get_reader(name, TextReader, **options)
