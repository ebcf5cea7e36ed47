"""The official files of the open-domain QA benchmarks of CoDA Table 1: Quasar-T and SearchQA.

Each reader yields ``{"id", "question", "answers" (list of gold strings), "passages" (list of texts, maybe
empty), "where" (file:line)}``; joining the passages into one context, finding the gold span and capping lengths
is the data module's (:mod:`coda_exp.data.span.context`).

- **Quasar-T** (Dhingra et al. 2017): ``questions/{train,dev,test}_questions.json.gz`` (JSON lines ``uid``,
  ``question``, ``answer``) and ``contexts/{short,long}/{train,dev,test}_contexts.json.gz`` (JSON lines ``uid``,
  ``contexts: [[score, text], ...]``); ``contexts`` picks the short or the long pseudo-documents.
- **SearchQA** (Dunn et al. 2017), the processed ``train.txt``, ``val.txt``, ``test.txt``: one question per line,
  ``<s> snippet </s> <s> snippet </s> ... ||| question ||| answer``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.files import iter_lines, read_jsonl
from coda_exp.data.common.readers import Reader, get_reader, register

CONTEXT_KINDS = ("short", "long")
QUASAR_SPLITS = {"train": "train", "validation": "dev", "test": "test"}  # our split -> the file's
_SNIPPET_RE = re.compile(r"<s>(.*?)</s>", re.DOTALL)


def _text(row: dict, key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: missing or empty field {key!r}; expected a string")
    return value.strip()


@dataclass(frozen=True)
class SpanReader(Reader):
    """A span-extraction benchmark: its file per split (relative to the data directory).

    ``ngram_metrics``: the benchmark also reports unigram-answer EM and n-gram-answer F1 (SearchQA, Dunn et al.).
    """

    files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ngram_metrics: bool = False

    def splits(self) -> tuple[str, ...]:
        return tuple(self.files)

    def split_files(self, split: str) -> tuple[str, ...]:
        return self.files[split]

    def all_files(self) -> list[str]:
        return [f for split in self.splits() for f in self.split_files(split)]

    def layout(self) -> str:
        return ", ".join(self.all_files())

    def local_files(self, directory: Path, split: str) -> list[Path]:
        names = self.split_files(split)
        directory = require_files(self.name, directory, names, self.all_files(), self.source_hint)
        return [directory / f for f in names]


@dataclass(frozen=True)
class QuasarReader(SpanReader):
    """Quasar-T: the questions file and the contexts file (``contexts``: short | long) of each split."""

    contexts: str = "short"

    def __post_init__(self):
        if self.contexts not in CONTEXT_KINDS:
            raise DataError(f"data.contexts must be one of {list(CONTEXT_KINDS)}, got {self.contexts!r}")

    def splits(self) -> tuple[str, ...]:
        return tuple(QUASAR_SPLITS)

    def split_files(self, split: str) -> tuple[str, ...]:
        s = QUASAR_SPLITS[split]
        return f"questions/{s}_questions.json.gz", f"contexts/{self.contexts}/{s}_contexts.json.gz"

    def _contexts(self, path: Path, split: str) -> dict[str, tuple[list[str], str]]:
        out: dict[str, tuple[list[str], str]] = {}
        for where, row in read_jsonl(path, split, "one JSON object per line with 'uid' and 'contexts'"):
            uid = row.get("uid")
            if not isinstance(uid, (str, int)) or isinstance(uid, bool):
                raise DataError(f"{where}: missing field 'uid'")
            contexts = row.get("contexts")
            if not isinstance(contexts, list):
                raise DataError(f"{where}: field 'contexts' must be a list of [score, text]")
            texts = []
            for item in contexts:
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (int, float))
                        and isinstance(item[1], str)):
                    raise DataError(f"{where}: context {str(item)[:60]!r} is not [score, text]")
                texts.append(item[1])
            if str(uid) in out:
                raise DataError(f"{where}: uid {uid!r} repeats {out[str(uid)][1]}")
            out[str(uid)] = (texts, where)
        return out

    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        questions, contexts_file = self.local_files(directory, split)
        contexts = self._contexts(contexts_file, split)
        seen: dict[str, str] = {}
        for where, row in read_jsonl(questions, split, "one JSON object per line with 'uid', 'question', 'answer'"):
            uid = row.get("uid")
            if not isinstance(uid, (str, int)) or isinstance(uid, bool):
                raise DataError(f"{where}: missing field 'uid'")
            if str(uid) in seen:  # its contexts would be the first question's: one line each in the contexts file
                raise DataError(f"{where}: uid {uid!r} repeats {seen[str(uid)]}")
            seen[str(uid)] = where
            question, answer = _text(row, "question", where), _text(row, "answer", where)
            if str(uid) not in contexts:
                raise DataError(f"{where}: question {uid!r} has no line in {contexts_file}")
            yield {"id": str(uid), "question": question, "answers": [answer], "passages": contexts[str(uid)][0],
                   "where": where}


@dataclass(frozen=True)
class SearchQAReader(SpanReader):
    """SearchQA's processed text files: ``<s> snippet </s> ... ||| question ||| answer`` per line."""

    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        (path,) = self.local_files(directory, split)
        expected = "one question per line: <s> snippet </s> ... ||| question ||| answer"
        for lineno, line in iter_lines(path, split, expected):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            parts = line.split("|||")
            if len(parts) != 3:
                raise DataError(f"{where}: malformed line with {len(parts)} fields separated by '|||'; expected "
                                "<s> snippet </s> ... ||| question ||| answer")
            snippets, question, answer = (p.strip() for p in parts)
            if not question or not answer:
                raise DataError(f"{where}: empty {'question' if not question else 'answer'}")
            passages = [s.strip() for s in _SNIPPET_RE.findall(snippets)]
            rest = _SNIPPET_RE.sub("", snippets).strip()
            if rest:
                raise DataError(f"{where}: text {rest[:40]!r} outside <s> ... </s> in the snippets field")
            yield {"id": f"{split}-{lineno}", "question": question, "answers": [answer],
                   "passages": [p for p in passages if p], "where": where}


def get_span_reader(name: str, **options) -> SpanReader:
    return get_reader(name, SpanReader, **options)


register(QuasarReader(
    name="quasart",
    hub_id=None,
    source_hint="Get them from http://curtis.ml.cmu.edu/datasets/quasar/ (quasar-t: questions/, contexts/).",
))
register(SearchQAReader(
    name="searchqa",
    hub_id=None,
    files={"train": ("train.txt",), "validation": ("val.txt",), "test": ("test.txt",)},
    ngram_metrics=True,
    source_hint="Get the processed files from https://github.com/nyu-dl/dl4ir-searchQA (or the R3/AMANDA "
                "preprocessed copies): train.txt, val.txt, test.txt.",
))
