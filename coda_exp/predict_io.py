"""The files of ``coda-exp predict``: inputs in, predictions out (:mod:`coda_exp.evaluate`).

Inputs: JSON lines (any name but ``.tsv``; ``.gz`` read as gzip), one object per input with the fields of the
model's family (the data module's ``INPUT_FIELDS``), or a tab-separated file (``.tsv``) whose header line names
those fields (no quoting: a field holds no tab):

==================================  ==========================================================================
family (tasks)                      fields
==================================  ==========================================================================
pair (SNLI, MNLI, SciTail, DNLI,    ``text_a``, ``text_b``; ranking tasks also take ``group`` (the question a
WikiQA, TrecQA, UDC)                candidate answers: candidates are ranked within it)
text (IMDb, SST, Yelp)              ``text``
seq2seq (MLU, AlgoLisp, IWSLT)      ``src`` (the source text, tokenized as the training files are)
span (Quasar-T, SearchQA)           ``question``, ``passages`` (a list of texts, or one text)
evidence (FEVER)                    ``claim``, ``evidence`` (a list of sentences, or one)
==================================  ==========================================================================

Every input may carry an ``id`` (copied to its prediction); other fields are ignored. A line that is not a JSON
object, lacks a field, holds a field of the wrong type or an empty one (an empty or blank text, an empty list) is a
:class:`~coda_exp.data.common.errors.DataError` naming ``file:line`` and the field; an empty file too, a ``.tsv``
file whose header has no tab but commas (a comma-separated file), and a ``.csv`` file (these messages name the two
formats read). Inputs mostly of tokens the model does not know are a warning (:func:`unknown_inputs`).

Predictions: JSON lines, one per input in input order, each with ``line`` (``file:line`` of its input), its ``id``
if given, and the family's prediction: ``label`` and ``probabilities`` (``{label: p}``) for classifiers (pair, text,
evidence); ``score`` (the log-odds of "relevant") and ``rank`` (1 = best within its ``group``) for ranking;
``hypothesis`` (the decoded text, decoded as the test decodes) for seq2seq; ``answer`` (the span's text),
``start``, ``end`` (context token indices, inclusive) and ``score`` for span extraction. A prediction whose numbers
are not finite (NaN, infinite: not JSON; a diverged checkpoint, a span task with no passage token to choose) is
written with its prediction fields ``null`` and ``invalid`` saying why, with one warning naming the first such input.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from coda_exp.data.common.errors import DataError
from coda_exp.data.common.files import read_jsonl, read_table
from coda_exp.io import atomic_write_text
from coda_exp.tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

log = logging.getLogger(__name__)

LIST_FIELDS = ("passages", "evidence")  # fields that may hold a list of texts
COPIED = ("id",)
PREDICTED = ("label", "probabilities", "score", "rank", "answer", "start", "end")  # null when a number is not finite


def default_output(path: Path) -> Path:
    """``inputs.jsonl`` -> ``inputs.predictions.jsonl`` beside it."""
    name = path.name.removesuffix(".gz")
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return path.with_name(f"{stem}.predictions.jsonl")


def other_inputs_output(output: Path, input_path: Path) -> str | None:
    """The input file whose predictions ``output`` holds (its first row's ``line``), when that is another file than
    ``input_path``: ``q.jsonl`` and ``q.jsonl.gz`` (or ``q.tsv``) share a default output, and one run must not
    overwrite the other's. None when ``output`` does not exist, holds no prediction rows, or was written for
    ``input_path`` itself (a rerun overwrites it)."""
    try:
        with output.open(encoding="utf-8") as f:
            first = json.loads(f.readline() or "null")
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    where = first.get("line") if isinstance(first, dict) else None
    if not isinstance(where, str) or ":" not in where:
        return None
    written_for = Path(where.rsplit(":", 1)[0])
    if written_for.name == input_path.name or written_for.expanduser().resolve() == input_path.expanduser().resolve():
        return None
    return str(written_for)


def _check(row: dict, fields: tuple[str, ...], where: str, family: str) -> dict:
    missing = [f for f in fields if f not in row]
    if missing:
        raise DataError(f"{where}: missing field(s) {', '.join(missing)}; the {family} family's inputs have "
                        f"{', '.join(fields)} (docs/running.md, coda-exp predict)")
    for f in (*fields, *(k for k in COPIED if k in row)):
        value = row[f]
        text = isinstance(value, str)
        listed = f in LIST_FIELDS and isinstance(value, list) and all(isinstance(v, str) for v in value)
        if f == "id" and isinstance(value, (int, float)) and not isinstance(value, bool):
            continue
        if not (text or listed):
            kind = "a string or a list of strings" if f in LIST_FIELDS else "a string"
            got = type(value).__name__
            if f in LIST_FIELDS and isinstance(value, list):  # the first element that is not a string, by position
                index, item = next((i, v) for i, v in enumerate(value) if not isinstance(v, str))
                got = f"a list whose element {index} (counting from 0) is {item!r}, of type {type(item).__name__}"
            raise DataError(f"{where}: field {f!r} must be {kind}, got {got}")
        if f in fields:
            _check_not_empty(value, f, where)
    return row


def _check_not_empty(value: str | list[str], name: str, where: str) -> None:
    """An empty or blank text, or an empty list, is nothing the model can read: its prediction would be made up
    (a decoder's output from no source) or not a number (a span from no passage)."""
    if isinstance(value, list):
        if not value:
            raise DataError(f"{where}: field {name!r} is an empty list; expected at least one non-empty text")
        blank = next((n for n, v in enumerate(value, 1) if not v.strip()), None)
        if blank is not None:
            raise DataError(f"{where}: field {name!r}: item {blank} of {len(value)} is empty; expected a non-empty "
                            f"text")
    elif not value.strip():
        raise DataError(f"{where}: field {name!r} is empty; expected a non-empty text")


def _formats(fields: tuple[str, ...]) -> str:
    named = ", ".join(fields) if fields else "the task's input fields"
    return (f"coda-exp predict reads JSON lines (one object per line with {named}; any name but .tsv) or a "
            f"tab-separated .tsv file whose header line names them")


def csv_input(path: str | os.PathLike, fields: tuple[str, ...] = ()) -> str | None:
    """What is wrong with a comma-separated ``.csv`` input (read as JSON lines, its first line was "malformed"),
    naming the formats read; None for any other name."""
    if not Path(path).name.removesuffix(".gz").lower().endswith(".csv"):
        return None
    return f"{path}: a comma-separated .csv file; {_formats(fields)}: convert it (e.g. tabs for the commas, as .tsv)"


def read_inputs(path: str | os.PathLike, fields: tuple[str, ...], family: str) -> tuple[list[dict], list[str]]:
    """(the inputs, the ``file:line`` of each) of a JSON-lines or TSV file (module docstring)."""
    path = Path(path)
    if not fields:
        raise DataError(f"coda-exp predict: not supported for the {family} family yet")
    if not path.is_file():
        raise DataError(f"{path}: {'a folder, not a file' if path.is_dir() else 'no such input file'}; expected "
                        f"JSON lines (or a .tsv file with a header) with {', '.join(fields)}")
    formats = _formats(fields)
    if problem := csv_input(path, fields):
        raise DataError(problem)
    rows, wheres = [], []
    if path.name.removesuffix(".gz").endswith(".tsv"):
        import csv

        header, body = read_table(path, expected=f"a header line naming {', '.join(fields)}", delimiter="\t",
                                  quoting=csv.QUOTE_NONE)
        if len(header) == 1 and "," in header[0]:
            raise DataError(f"{path}:1: the header line {header[0]!r} has no tab but has commas: a .tsv input must be "
                            f"tab-separated (a header naming {', '.join(fields)}, then one input per line, a tab "
                            f"between fields); convert the file, or give JSON lines")
        for lineno, values in body:
            where = f"{path}:{lineno}"
            rows.append(_check(dict(zip(header, values)), fields, where, family))
            wheres.append(where)
    else:
        for where, row in read_jsonl(path, None, f"one JSON object per line with {', '.join(fields)}", formats):
            rows.append(_check(row, fields, where, family))
            wheres.append(where)
    return rows, wheres


def _ids(value) -> list[int]:
    """The token ids of an encoded field (a list, or a list of lists: FEVER's evidence sentences), special ids aside."""
    flat = [t for v in value for t in (v if isinstance(v, list) else [v])]
    return [t for t in flat if t not in (PAD_ID, BOS_ID, EOS_ID)]


def unknown_inputs(encoded: list[dict], wheres: list[str], keys: tuple[str, ...]) -> str | None:
    """A warning for inputs of which more than half the tokens (the ``keys`` of their encoded rows, a data module's
    ``INPUT_IDS``) are unknown to the model's vocabulary: the model sees ``<unk>`` and its prediction says nothing of
    the text (an MLU model given words, another task's text, other casing or tokenization). None when there are
    none; not an error, the predictions are written."""
    mostly, entirely = [], 0
    for row, where in zip(encoded, wheres):
        ids = [t for k in keys for t in _ids(row.get(k) or [])]
        unknown = sum(t == UNK_ID for t in ids)
        if ids and unknown * 2 > len(ids):
            mostly.append(where)
            entirely += unknown == len(ids)
    if not mostly:
        return None
    return (f"{len(mostly)} of {len(encoded)} inputs are mostly tokens the model does not know ({entirely} entirely; "
            f"the first: {mostly[0]}): the model reads them as <unk>, so their predictions say little of the text; "
            "are they of this task, cased and tokenized as its training data?")


def _ranks(rows: list[dict], scores: list[float]) -> list[int]:
    """The rank (1 = best) of each candidate among those of its ``group``."""
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(str(row.get("group", "")), []).append(i)
    ranks = [0] * len(rows)
    for members in groups.values():  # a score that is not a number ranks last (its row says it is invalid)
        for r, i in enumerate(sorted(members, key=lambda i: -scores[i] if math.isfinite(scores[i]) else math.inf), 1):
            ranks[i] = r
    return ranks


def _not_finite(line: dict) -> list[str]:
    """The numbers of a prediction row that are not finite (``score=-inf``, ``probabilities[yes]=nan``)."""
    bad = [f"score={line['score']}"] if isinstance(line.get("score"), float) and not math.isfinite(line["score"]) \
        else []
    return bad + [f"probabilities[{k}]={p}" for k, p in (line.get("probabilities") or {}).items()
                  if isinstance(p, float) and not math.isfinite(p)]


def _invalid(line: dict, bad: list[str]) -> None:
    """A row whose numbers are not finite (not JSON): its prediction fields null, ``invalid`` saying why."""
    for key in PREDICTED:
        if key in line:
            line[key] = None
    line["invalid"] = (f"the model's output is not a finite number ({', '.join(bad)}): no prediction (a span task "
                       f"finds no passage token it can choose; a NaN comes from a diverged checkpoint)")


def prediction_rows(preds: list[dict], rows: list[dict], wheres: list[str], encoded: list[dict],
                    label_names: list[str] | None) -> list[dict]:
    """One output row per input (module docstring), from the task's ``predict_step`` rows (by ``index``)."""
    by_index = {p["index"]: p for p in preds}
    if sorted(by_index) != list(range(len(rows))):
        raise RuntimeError(f"predict: {len(by_index)} predictions for {len(rows)} inputs")
    ordered = [by_index[i] for i in range(len(rows))]
    ranks = _ranks(rows, [p["score"] for p in ordered]) if ordered and "score" in ordered[0] \
        and "start" not in ordered[0] else None
    out = []
    for i, (p, row, where) in enumerate(zip(ordered, rows, wheres)):
        line = {"line": where, **{k: row[k] for k in COPIED if k in row}}
        if "hypothesis" in p:
            line["hypothesis"] = p["hypothesis"]
        elif "start" in p:
            tokens = encoded[i]["context_tokens"]
            line.update(answer="".join(tokens[p["start"]: p["end"] + 1]).strip(), start=p["start"], end=p["end"],
                        score=p["score"])
        elif "score" in p:
            line.update(score=p["score"], rank=ranks[i], **({"group": row["group"]} if "group" in row else {}))
        else:
            names = label_names or [str(k) for k in range(len(p["probabilities"]))]
            line.update(label=names[p["prediction"]], probabilities=dict(zip(names, p["probabilities"])))
        if bad := _not_finite(line):
            _invalid(line, bad)
        out.append(line)
    invalid = [line for line in out if "invalid" in line]
    if invalid:
        log.warning("%d of %d predictions are not finite numbers, written as null with 'invalid' saying why; the "
                    "first: %s (%s)", len(invalid), len(out), invalid[0]["line"], invalid[0]["invalid"])
    return out


def write_predictions(rows: list[dict], path: Path) -> Path:
    """The prediction rows as JSON lines, written atomically (strict JSON: a NaN or infinity is an error)."""
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows))
