"""Readers for the benchmarks' official files (or the Hugging Face hub), yielding one schema for pair tasks.

Every reader turns its benchmark into examples ``{"text_a", "text_b", "label", "group"}``: two texts, an integer
label and, for ranking tasks, the id of the query the pair belongs to ("" for classification). Local files are
parsed line by line so that a malformed row is reported with its file and line number; the examples are then
stored as a cached :class:`datasets.Dataset`.
"""

from __future__ import annotations

import csv
import os
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coda_exp.data.common.errors import DataError, did_you_mean, require_files, require_readable
from coda_exp.data.common.files import read_jsonl, read_table
from coda_exp.data.common.readers import READERS, Reader, get_reader, register
from coda_exp.data.common.splits import is_test_split

__all__ = ["READERS", "PairReader", "get_pair_reader", "register", "require_str", "require_text"]


@dataclass(frozen=True)
class PairReader(Reader):
    """A pair benchmark: its label names, its official file per split (``files``) and hub split names."""

    label_names: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    hub_splits: dict[str, str] = field(default_factory=dict)
    hub_config: str | None = None  # the hub dataset's configuration name, if it has several

    def expected_files(self) -> list[str]:
        return list(self.files.values())

    def layout(self) -> str:
        return "the official files " + ", ".join(self.expected_files())

    def splits(self) -> tuple[str, ...]:
        """The splits this benchmark ships files for: ``train``, usually ``validation``, and one or more test
        sets (``test``, or named ``test_<name>``, e.g. MNLI's ``test_matched`` and ``test_mismatched``)."""
        return tuple(self.files)

    def test_splits(self) -> list[str]:
        return [s for s in self.files if is_test_split(s)]

    def missing_message(self, directory: Path, missing: list[str]) -> str:
        return (
            f"{self.name}: data directory {str(directory)!r} lacks {', '.join(missing)}"
            f"{did_you_mean(Path(directory), missing)}. "
            f"Expected the official files {', '.join(self.expected_files())} in it. {self.source_hint}"
        )

    def path(self, directory: str | os.PathLike, split: str) -> Path:
        """The file of ``split``: only it is needed (an evaluation reads its own split's file alone)."""
        needed = [self.files[split]]
        return require_files(self.name, directory, needed, self.expected_files(), self.source_hint) / needed[0]

    def local_files(self, directory: Path, split: str) -> list[Path]:
        """The file of ``split`` (a folder of files for TrecQA's tokenised layout), checked to be readable: asked
        before a run starts (``coda_exp.sweep_data.data_problem``), so an unreadable file is refused then."""
        return [require_readable(self.name, self.path(directory, split), files_inside=True)]

    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        yield from self.read_file(self.path(directory, split), split)

    @abstractmethod
    def read_file(self, path: Path, split: str) -> Iterator[dict]:
        """Examples ``{"text_a", "text_b", "label", "group"}`` of one official file, validated row by row."""

    def label_id(self, label: str, where: str) -> int:
        try:
            return self.label_names.index(label)
        except ValueError:
            raise DataError(
                f"{where}: unknown label {label!r} for {self.name}; expected one of {list(self.label_names)}"
            ) from None

    def load_hub(self, split: str):
        """``datasets.load_dataset`` of ``hub_id`` (and ``hub_config``) for ``split``."""
        import datasets

        args = (self.hub_id,) if self.hub_config is None else (self.hub_id, self.hub_config)
        return datasets.load_dataset(*args, split=self.hub_splits.get(split, split))


def get_pair_reader(name: str) -> PairReader:
    return get_reader(name, PairReader)


def require_str(row: dict, keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if not isinstance(row.get(key), str):
            raise DataError(f"{where}: missing or non-string field {key!r}")


def require_text(where: str, texts: dict[str, str]) -> None:
    """A DataError naming ``where`` (``file:line``) and the field where a text of the row (``{field: text}``) is
    empty or blank: a pair missing a side is a damaged row, not an example, refused as SearchQA's, UDC's and
    TrecQA's readers and ``coda-exp predict`` refuse it. (No official file of these benchmarks is known to hold
    one; the one documented quirk, SNLI's and MultiNLI's gold label ``-``, is skipped by design.)"""
    for name, text in texts.items():
        if not text.strip():
            raise DataError(f"{where}: field {name!r} is empty; expected a non-empty text (fix or delete the row)")


class SnliReader(PairReader):
    """SNLI 1.0 (Bowman et al. 2015): ``snli_1.0_{train,dev,test}.jsonl``; pairs with gold label ``-`` are dropped."""

    def read_file(self, path: Path, split: str) -> Iterator[dict]:
        for where, row in read_jsonl(path, split):
            require_str(row, ("gold_label", "sentence1", "sentence2"), where)
            if row["gold_label"] == "-":
                continue
            require_text(where, {"sentence1": row["sentence1"], "sentence2": row["sentence2"]})
            yield {"text_a": row["sentence1"], "text_b": row["sentence2"],
                   "label": self.label_id(row["gold_label"], where), "group": ""}

    def read_hub(self, split: str) -> Iterator[dict]:
        for row in self.load_hub(split):
            if row["label"] < 0:  # the hub's -1 is SNLI's "-": no gold label
                continue
            yield {"text_a": row["premise"], "text_b": row["hypothesis"], "label": int(row["label"]), "group": ""}


WIKIQA_COLUMNS = ("QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label")


class WikiQAReader(PairReader):
    """WikiQA (Yang et al. 2015): ``WikiQA-{train,dev,test}.tsv``, one candidate sentence per row, grouped by question."""

    def read_file(self, path: Path, split: str) -> Iterator[dict]:
        header, rows = read_table(path, split, f"a header line {'<TAB>'.join(WIKIQA_COLUMNS)}", delimiter="\t",
                                  quoting=csv.QUOTE_NONE)
        missing = [c for c in ("QuestionID", "Question", "Sentence", "Label") if c not in header]
        if missing:
            raise DataError(f"{path}:1: header lacks column(s) {missing}; expected {list(WIKIQA_COLUMNS)}")
        col = {name: header.index(name) for name in ("QuestionID", "Question", "Sentence", "Label")}
        for lineno, row in rows:
            where = f"{path}:{lineno}"
            require_text(where, {c: row[col[c]] for c in ("QuestionID", "Question", "Sentence")})
            yield {"text_a": row[col["Question"]], "text_b": row[col["Sentence"]],
                   "label": self.label_id(row[col["Label"]].strip(), where), "group": row[col["QuestionID"]]}

    def read_hub(self, split: str) -> Iterator[dict]:
        for row in self.load_hub(split):
            yield {"text_a": row["question"], "text_b": row["answer"], "label": int(row["label"]),
                   "group": row["question_id"]}


for _reader in (
    SnliReader(
        name="snli",
        label_names=("entailment", "neutral", "contradiction"),
        files={"train": "snli_1.0_train.jsonl", "validation": "snli_1.0_dev.jsonl", "test": "snli_1.0_test.jsonl"},
        hub_id="snli",
        source_hint="Get them from https://nlp.stanford.edu/projects/snli/ (snli_1.0.zip, folder snli_1.0/).",
    ),
    WikiQAReader(
        name="wikiqa",
        label_names=("0", "1"),
        files={"train": "WikiQA-train.tsv", "validation": "WikiQA-dev.tsv", "test": "WikiQA-test.tsv"},
        hub_id="wiki_qa",
        source_hint="Get them from the WikiQA corpus release by Microsoft Research "
                    "(WikiQACorpus.zip, folder WikiQACorpus/).",
    ),
):
    register(_reader)
