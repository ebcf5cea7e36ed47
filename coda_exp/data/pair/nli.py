"""Readers of the NLI benchmarks of CoDA Table 3 beside SNLI: MultiNLI, SciTail and Dialogue NLI.

Each yields ``{"text_a": premise, "text_b": hypothesis, "label": int, "group": ""}`` and reports a malformed
row with its file and line (see :mod:`coda_exp.data.pair.readers`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.files import iter_records, read_jsonl, read_text
from coda_exp.data.pair.readers import PairReader, SnliReader, register, require_str, require_text

NLI3 = ("entailment", "neutral", "contradiction")


class MnliReader(SnliReader):
    """MultiNLI 1.0 (Williams et al. 2018): ``multinli_1.0_{train,dev_matched,dev_mismatched}.jsonl``, the SNLI
    JSON-lines schema plus ``genre``. Pairs with gold label ``-`` are dropped.

    The test labels are not public, so the two development sets are this project's test sets (``test_matched``,
    ``test_mismatched``: what the paper reports) and the validation set for model selection is held out of the
    training file (``data.validation_from_train``, see :class:`~coda_exp.data.PairDataModule`).
    """

    def read_hub(self, split: str) -> Iterator[dict]:
        for row in self.load_hub(split):
            if row["label"] < 0:
                continue
            yield {"text_a": row["premise"], "text_b": row["hypothesis"], "label": int(row["label"]), "group": ""}


SCITAIL_SPLITS = {"train": "train", "validation": "dev", "test": "test"}


class SciTailReader(PairReader):
    """SciTail v1.1 (Khot et al. 2018), labels ``entails`` / ``neutral``, from either release format:

    - ``tsv_format/scitail_1.0_{train,dev,test}.tsv``: ``premise<TAB>hypothesis<TAB>label`` (no header);
    - ``snli_format/scitail_1.0_{train,dev,test}.txt``: SNLI-style JSON lines (``sentence1``, ``sentence2``,
      ``gold_label`` = ``entailment`` / ``neutral``; ``entailment`` is read as ``entails``).

    ``data.dir`` may be the release folder ``SciTailV1.1/`` (holding both sub-folders; ``tsv_format`` is used
    when present) or one of the two format folders itself.
    """

    def layouts(self, directory: Path) -> list[tuple[Path, str]]:
        """(folder, extension) candidates, in order of preference."""
        return [(directory / "tsv_format", ".tsv"), (directory, ".tsv"), (directory / "snli_format", ".txt"),
                (directory, ".txt")]

    def path(self, directory, split: str) -> Path:
        directory = Path(directory)
        require_files(self.name, directory, [], self.expected_files(), self.source_hint)  # a folder, not a file
        candidates = [{s: folder / f"scitail_1.0_{name}{ext}" for s, name in SCITAIL_SPLITS.items()}
                      for folder, ext in self.layouts(directory)]
        for paths in candidates:  # a complete set first (the layout a training run reads), then the split's file
            if all(p.is_file() for p in paths.values()):
                return paths[split]
        for paths in candidates:  # no complete set (an evaluation's folder): the split's own file, in one format
            if paths[split].is_file():
                ext = paths[split].suffix
                here = {s for other in candidates for s, q in other.items() if q.suffix == ext and q.is_file()}
                mixed = [str(q) for other in candidates for s, q in other.items()
                         if s != split and s not in here and q.suffix != ext and q.is_file()]
                if mixed:  # train as tsv and dev only as snli_format: refused, not read in two formats
                    raise DataError(f"{self.name}: {directory} mixes SciTail's two formats ({paths[split]} and "
                                    f"{mixed[0]}): give every split in one of them. "
                                    f"Expected {' '.join(self.expected_files())}")
                return paths[split]
        name = SCITAIL_SPLITS[split]
        wanted = f"tsv_format/scitail_1.0_{name}.tsv (or snli_format/scitail_1.0_{name}.txt)"
        raise DataError(self.missing_message(directory, [wanted]))

    def expected_files(self) -> list[str]:
        return [f"tsv_format/scitail_1.0_{{{','.join(SCITAIL_SPLITS.values())}}}.tsv",
                f"or snli_format/scitail_1.0_{{{','.join(SCITAIL_SPLITS.values())}}}.txt"]

    def read_file(self, path: Path, split: str) -> Iterator[dict]:
        if path.suffix == ".txt":
            for where, row in read_jsonl(path, split):
                require_str(row, ("gold_label", "sentence1", "sentence2"), where)
                if row["gold_label"] == "-":
                    continue
                require_text(where, {"sentence1": row["sentence1"], "sentence2": row["sentence2"]})
                label = "entails" if row["gold_label"] == "entailment" else row["gold_label"]
                yield {"text_a": row["sentence1"], "text_b": row["sentence2"],
                       "label": self.label_id(label, where), "group": ""}
            return
        for where, line in iter_records(path, split, "premise<TAB>hypothesis<TAB>label lines"):
            fields = line.split("\t")
            if len(fields) != 3:
                raise DataError(f"{where}: malformed row with {len(fields)} tab-separated fields; expected 3 "
                                "(premise, hypothesis, label)")
            require_text(where, {"premise (column 1)": fields[0], "hypothesis (column 2)": fields[1]})
            yield {"text_a": fields[0], "text_b": fields[1], "label": self.label_id(fields[2].strip(), where),
                   "group": ""}

    def read_hub(self, split: str) -> Iterator[dict]:
        for row in self.load_hub(split):
            yield {"text_a": row["premise"], "text_b": row["hypothesis"], "label": self.label_names.index(row["label"]),
                   "group": ""}


class DnliReader(PairReader):
    """Dialogue NLI (Welleck et al. 2019): ``dialogue_nli_{train,dev,test}.jsonl`` of the release (folder
    ``dialogue_nli/``, which ``data.dir`` may also point above). Despite the extension, the released files hold
    one JSON *array* of objects; JSON lines (one object per line) are accepted too. Fields ``sentence1``,
    ``sentence2``, ``label`` (``positive`` = entailment, ``neutral``, ``negative`` = contradiction); ``triple1``,
    ``triple2``, ``dtype``, ``id`` are ignored. Errors name the line (JSON lines) or the array element and its id.
    """

    def path(self, directory, split: str) -> Path:
        directory = Path(directory)
        nested = directory / "dialogue_nli"
        if nested.is_dir() and not (directory / self.files[split]).is_file():
            directory = nested
        return super().path(directory, split)

    def _rows(self, path: Path, split: str) -> Iterator[tuple[str, object]]:
        text = read_text(path, split, "a JSON array of DNLI examples (or JSON lines)")
        if not text.lstrip().startswith("["):
            yield from read_jsonl(path, split)
            return
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg}); expected an array of objects") from None
        for i, row in enumerate(data):
            ident = row.get("id") if isinstance(row, dict) else None
            yield f"{path}: element {i}" + (f" (id {ident})" if ident else ""), row

    def read_file(self, path: Path, split: str) -> Iterator[dict]:
        for where, row in self._rows(path, split):
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            require_str(row, ("label", "sentence1", "sentence2"), where)
            require_text(where, {"sentence1": row["sentence1"], "sentence2": row["sentence2"]})
            yield {"text_a": row["sentence1"], "text_b": row["sentence2"],
                   "label": self.label_id(row["label"], where), "group": ""}


for _reader in (
    MnliReader(
        name="mnli",
        label_names=NLI3,
        files={"train": "multinli_1.0_train.jsonl", "test_matched": "multinli_1.0_dev_matched.jsonl",
               "test_mismatched": "multinli_1.0_dev_mismatched.jsonl"},
        hub_id="nyu-mll/multi_nli",
        hub_splits={"test_matched": "validation_matched", "test_mismatched": "validation_mismatched"},
        source_hint="Get them from https://cims.nyu.edu/~sbowman/multinli/ (multinli_1.0.zip, folder "
                    "multinli_1.0/).",
    ),
    SciTailReader(
        name="scitail",
        label_names=("entails", "neutral"),
        files={s: f"scitail_1.0_{name}" for s, name in SCITAIL_SPLITS.items()},
        hub_id="allenai/scitail",
        hub_config="tsv_format",
        source_hint="Get SciTailV1.1.zip from https://allenai.org/data/scitail and pass its folder SciTailV1.1/.",
    ),
    DnliReader(
        name="dnli",
        label_names=("positive", "neutral", "negative"),
        files={"train": "dialogue_nli_train.jsonl", "validation": "dialogue_nli_dev.jsonl",
               "test": "dialogue_nli_test.jsonl"},
        hub_id=None,
        source_hint="Get dialogue_nli.zip from https://wellecks.github.io/dialogue_nli/ (folder dialogue_nli/).",
    ),
):
    register(_reader)
