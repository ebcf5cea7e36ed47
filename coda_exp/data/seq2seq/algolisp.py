"""AlgoLisp (Polosukhin & Skidanov 2018; CoDA Table 7): the official ``metaset3.{train,dev,test}.jsonl`` files.

Each line is one JSON object; the fields used are ``text`` (the problem statement, a list of tokens or, in some
releases, one string), ``short_tree`` (the program as a nested list), ``args`` (name -> type), ``return_type`` and
``tests`` (``[{"input": {name: value}, "output": value}, ...]``); others (``nodes``, ``tags``, ...) are ignored.
The source is the statement's tokens joined by spaces; the target is the program flattened with bracket tokens,
``( reduce ( slice a 1 ( len a ) ) 0 + )`` (:func:`coda_exp.algolisp.flatten_tree`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coda_exp.algolisp import AlgoLispError, flatten_tree
from coda_exp.algolisp.interpreter import unknown_symbols
from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.files import read_jsonl
from coda_exp.data.common.readers import Reader, register

ALGOLISP_FILES = {"train": "metaset3.train.jsonl", "validation": "metaset3.dev.jsonl", "test": "metaset3.test.jsonl"}
ALGOLISP_SOURCE_HINT = ("AlgoLisp is published by NEAR (github.com/nearai/program_synthesis, algolisp/README); "
                        "download the metaset3 files and pass data.dir=DIR pointing to them.")


def _check_tests(tests, args: dict, where: str) -> list[dict]:
    if not isinstance(tests, list):
        raise DataError(f"{where}: field 'tests' must be a list of {{'input': {{...}}, 'output': ...}}")
    for k, t in enumerate(tests):
        if not isinstance(t, dict) or not isinstance(t.get("input"), dict) or "output" not in t:
            raise DataError(f"{where}: tests[{k}] must be an object with an 'input' object and an 'output'")
        if set(t["input"]) != set(args):
            raise DataError(f"{where}: tests[{k}]'s input names {sorted(t['input'])}, the arguments are "
                            f"{sorted(args)}: a test gives a value to each argument")
    return tests


@dataclass(frozen=True)
class AlgoLispReader(Reader):
    """The metaset3 files; examples ``{"src", "tgt", "tests", "args", "return_type", "index", "where", "unknown"}``
    (``where``: ``file:line``; ``unknown``: the gold program's symbols the interpreter does not know).

    ``tgt`` is the space-joined :func:`~coda_exp.algolisp.flatten_tree` of ``short_tree``; ``index`` counts the
    examples of the file. A malformed line is a :class:`DataError` naming ``file:line`` and the field at fault.
    """

    def layout(self) -> str:
        return ", ".join(ALGOLISP_FILES.values())

    def local_files(self, directory: Path, split: str) -> list[Path]:
        needed = [ALGOLISP_FILES[split]]
        return [require_files(self.name, directory, needed, ALGOLISP_FILES.values(), self.source_hint) / needed[0]]

    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        yield from self.read_file(self.local_files(directory, split)[0], split)

    def read_file(self, path: Path, split: str | None = None) -> Iterator[dict]:
        """The examples of one metaset3 file."""
        for index, (where, row) in enumerate(read_jsonl(path, split)):
            yield self._example(row, where, index)

    @staticmethod
    def _example(row: dict, where: str, index: int) -> dict:
        missing = [k for k in ("text", "short_tree", "args", "return_type", "tests") if k not in row]
        if missing:
            raise DataError(f"{where}: missing field(s) {missing}")
        text = row["text"]
        if isinstance(text, list) and all(isinstance(t, str) for t in text):
            text = " ".join(text)
        elif not isinstance(text, str):
            raise DataError(f"{where}: field 'text' must be a list of token strings or a string")
        if not text.strip():
            raise DataError(f"{where}: field 'text' is empty: the problem statement is the model's input")
        if not isinstance(row["args"], dict) or not all(isinstance(t, str) for t in row["args"].values()):
            raise DataError(f"{where}: field 'args' must be an object mapping argument names to type names")
        if not isinstance(row["return_type"], str):
            raise DataError(f"{where}: field 'return_type' must be a type name (a string), got "
                            f"{row['return_type']!r}")
        try:
            tgt = " ".join(flatten_tree(row["short_tree"]))
        except AlgoLispError as e:
            raise DataError(f"{where}: field 'short_tree' is not a program: {e}") from None
        return {"src": text, "tgt": tgt, "tests": _check_tests(row["tests"], row["args"], where), "args": row["args"],
                "return_type": row["return_type"], "index": index, "where": where,
                "unknown": unknown_symbols(row["short_tree"], list(row["args"]))}


ALGOLISP = register(AlgoLispReader(name="algolisp", hub_id=None, source_hint=ALGOLISP_SOURCE_HINT))
