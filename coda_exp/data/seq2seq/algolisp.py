"""AlgoLisp (Polosukhin & Skidanov 2018; CoDA Table 7): the official ``metaset3.{train,dev,test}.jsonl`` files.

Each line is one JSON object; the fields used are ``text`` (the problem statement, a list of tokens or, in some
releases, one string), ``short_tree`` (the program as a nested list), ``args`` (name -> type), ``return_type`` and
``tests`` (``[{"input": {name: value}, "output": value}, ...]``); others (``nodes``, ``tags``, ...) are ignored.
The source is the statement's tokens joined by spaces; the target is the program flattened with bracket tokens,
``( reduce ( slice a 1 ( len a ) ) 0 + )``. String literals keep their quotes (``" "`` is one token); the lexer of
:func:`parse_program` reads a quoted literal as one token even if its inside was split on spaces, so a target that
went through ``str.split`` and back parses to the same program.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.pair.readers import read_jsonl_objects

ALGOLISP_FILES = {"train": "metaset3.train.jsonl", "validation": "metaset3.dev.jsonl", "test": "metaset3.test.jsonl"}
ALGOLISP_SOURCE_HINT = ("AlgoLisp is published by NEAR (github.com/nearai/program_synthesis, algolisp/README); "
                        "download the metaset3 files and pass data_dir=... pointing to them.")

class AlgoLispError(ValueError):
    """An AlgoLisp program is malformed (syntax) or failed at run time (unknown function, type error, budget)."""


def flatten_tree(tree) -> list[str]:
    """``["reduce", ["slice", "a", "1", ["len", "a"]], "0", "+"]`` -> ``( reduce ( slice a 1 ( len a ) ) 0 + )``."""
    out: list[str] = []

    def walk(node) -> None:
        if isinstance(node, list):
            if not node:
                raise AlgoLispError("empty list in a program tree: every call needs a function")
            out.append("(")
            for child in node:
                walk(child)
            out.append(")")
        elif isinstance(node, bool) or not isinstance(node, (str, int)):
            raise AlgoLispError(f"program tree leaf {node!r} is not a string or an integer")
        else:
            token = str(node)
            if not token or token in ("(", ")"):
                raise AlgoLispError(f"program tree leaf {token!r} is not a symbol")
            out.append(token)

    walk(tree)
    return out


def tokenize_program(text: str) -> list[str]:
    """Split on spaces and brackets; a double-quoted literal (``"a b"``) is one token, its inside kept verbatim."""
    tokens, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()":
            tokens.append(ch)
            i += 1
        elif ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise AlgoLispError(f"unterminated string literal at character {i}: {text[i:i + 20]!r}")
            tokens.append(text[i:end + 1])
            i = end + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '()"':
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


def parse_program(tokens: str | Sequence[str]):
    """Inverse of :func:`flatten_tree`: tokens (or their space-joined string) -> nested lists of strings.

    Raises :class:`AlgoLispError` on unbalanced brackets, an empty call ``( )``, trailing tokens or no tokens.
    """
    text = tokens if isinstance(tokens, str) else " ".join(tokens)
    toks = tokenize_program(text)
    if not toks:
        raise AlgoLispError("empty program")
    stack: list[list] = []
    result = None
    for pos, tok in enumerate(toks):
        if result is not None:
            raise AlgoLispError(f"tokens after the end of the program at token {pos}: {' '.join(toks[pos:pos + 5])}")
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if not stack:
                raise AlgoLispError(f"unbalanced brackets: ')' at token {pos} closes nothing")
            node = stack.pop()
            if not node:
                raise AlgoLispError(f"empty call '( )' at token {pos}")
            if stack:
                stack[-1].append(node)
            else:
                result = node
        elif stack:
            stack[-1].append(tok)
        else:
            result = tok  # a bare symbol is a whole program
    if stack:
        raise AlgoLispError(f"unbalanced brackets: {len(stack)} '(' never closed")
    return result


def _check_tests(tests, where: str) -> list[dict]:
    if not isinstance(tests, list):
        raise DataError(f"{where}: field 'tests' must be a list of {{'input': {{...}}, 'output': ...}}")
    for k, t in enumerate(tests):
        if not isinstance(t, dict) or not isinstance(t.get("input"), dict) or "output" not in t:
            raise DataError(f"{where}: tests[{k}] must be an object with an 'input' object and an 'output'")
    return tests


def read_algolisp(path: str | os.PathLike) -> Iterator[dict]:
    """Examples ``{"src", "tgt", "tests", "args", "return_type", "index"}`` of one metaset3 file, line by line.

    ``tgt`` is the space-joined :func:`flatten_tree` of ``short_tree``; ``index`` counts the examples of the file.
    A malformed line is a :class:`DataError` naming ``file:line`` and the field at fault.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"AlgoLisp: no file {str(path)!r}. {ALGOLISP_SOURCE_HINT}")
    for index, (where, row) in enumerate(read_jsonl_objects(path)):
        missing = [k for k in ("text", "short_tree", "args", "return_type", "tests") if k not in row]
        if missing:
            raise DataError(f"{where}: missing field(s) {missing}")
        text = row["text"]
        if isinstance(text, list) and all(isinstance(t, str) for t in text):
            text = " ".join(text)
        elif not isinstance(text, str):
            raise DataError(f"{where}: field 'text' must be a list of token strings or a string")
        if not isinstance(row["args"], dict):
            raise DataError(f"{where}: field 'args' must be an object mapping argument names to types")
        try:
            tgt = " ".join(flatten_tree(row["short_tree"]))
        except AlgoLispError as e:
            raise DataError(f"{where}: field 'short_tree' is not a program: {e}") from None
        yield {"src": text, "tgt": tgt, "tests": _check_tests(row["tests"], where), "args": row["args"],
               "return_type": row["return_type"], "index": index}


def algolisp_path(data_dir: str | os.PathLike, split: str) -> Path:
    """The official file of ``split`` (train / validation / test) in ``data_dir``, or a DataError naming all three."""
    if split not in ALGOLISP_FILES:
        raise ValueError(f"AlgoLisp split {split!r} unknown; expected one of {list(ALGOLISP_FILES)}")
    files = list(ALGOLISP_FILES.values())
    return require_files("AlgoLisp", data_dir, files, files, ALGOLISP_SOURCE_HINT) / ALGOLISP_FILES[split]
