"""Readers of the ranking benchmarks of CoDA Table 2 beside WikiQA: TrecQA and the Ubuntu Dialogue Corpus v1.

Both yield ``{"text_a": query, "text_b": candidate, "label": 0/1, "group": query id}``; evaluation groups are
ranked by :class:`~coda_exp.tasks.RankingTask`. Which questions are evaluated (TrecQA raw vs clean) is the data
module's ``eval_protocol``, not the reader's: readers keep every candidate they find.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.files import iter_lines, of_split, read_lines, read_table
from coda_exp.data.pair.readers import PairReader, register

log = logging.getLogger(__name__)

# ---- TrecQA ----------------------------------------------------------------------------------------------

TRECQA_XML = {  # preferred first; the jacana release's original names second
    "train": ("TRAIN-ALL.xml", "train2393.cleanup.xml", "train2393.cleanup.xml.gz", "TRAIN.xml",
              "train-less-than-40.manual-edit.xml"),
    "validation": ("DEV.xml", "dev-less-than-40.manual-edit.xml"),
    "test": ("TEST.xml", "test-less-than-40.manual-edit.xml"),
}
TRECQA_TOKS = {"train": ("train-all", "train"), "validation": ("raw-dev", "dev", "clean-dev"),
               "test": ("raw-test", "test", "clean-test")}
TOKS_FILES = ("a.toks", "b.toks", "sim.txt", "id.txt")
_QAPAIRS = re.compile(r"""^<QApairs\s+id=['"]([^'"]*)['"]\s*>$""")


class TrecQAReader(PairReader):
    """TrecQA (Wang et al. 2007; Yao et al. 2013) from one of two layouts in ``data.dir``:

    1. the jacana-style XML: ``TRAIN-ALL.xml`` (else ``TRAIN.xml``), ``DEV.xml``, ``TEST.xml``, or jacana's original
       names ``train2393.cleanup.xml[.gz]`` (TRAIN-ALL), ``train-less-than-40.manual-edit.xml`` (TRAIN),
       ``dev-less-than-40.manual-edit.xml``, ``test-less-than-40.manual-edit.xml``. Each ``<QApairs id='..'>``
       holds one ``<question>`` and any number of ``<positive>`` / ``<negative>`` candidates; the first line inside
       each element is its tab-separated tokens (the POS / dependency / NER lines after it are ignored). The
       files are not well-formed XML, so they are read line by line.
    2. the ``a.toks b.toks sim.txt id.txt`` layout: folders ``train-all/`` (else ``train/``), ``raw-dev/`` (else
       ``dev/``, ``clean-dev/``), ``raw-test/`` (else ``test/``, ``clean-test/``), one question / candidate /
       0-1 label / question id per line.

    The XML layout is used when all three of its splits are present, else the folder layout. TRAIN-ALL is
    preferred to TRAIN. A question without any candidate cannot be ranked: it is skipped with a warning.
    """

    def _resolve(self, directory: Path, splits: tuple[str, ...] = tuple(TRECQA_XML)) -> dict[str, Path] | None:
        xml = {s: next((directory / n for n in names if (directory / n).is_file()), None)
               for s, names in TRECQA_XML.items() if s in splits}
        if all(xml.values()):
            return xml
        toks = {s: next((directory / n for n in names if all((directory / n / f).is_file() for f in TOKS_FILES)),
                        None) for s, names in TRECQA_TOKS.items() if s in splits}
        return toks if all(toks.values()) else None

    def path(self, directory, split: str) -> Path:
        directory = Path(directory)
        require_files(self.name, directory, [], self.expected_files(), self.source_hint)  # a folder, not a file
        found = self._resolve(directory)  # all three in one layout (a training run's folder)
        if found is None and (found := self._resolve(directory, (split,))) is not None:  # the split's own file
            xml = found[split].is_file()
            same, other = (TRECQA_XML, TRECQA_TOKS) if xml else (TRECQA_TOKS, TRECQA_XML)  # the layout it is not in
            mixed = [n for s, names in other.items() if s != split
                     and not any((directory / m).exists() for m in same[s]) for n in names if (directory / n).exists()]
            if mixed:  # XML train beside a raw-dev/ folder: refused, not read in two layouts
                raise DataError(f"{self.name}: {directory} mixes TrecQA's two layouts ({found[split].name} and "
                                f"{mixed[0]}): give every split in one of them. "
                                f"Expected {' '.join(self.expected_files())}")
        if found is None:
            wanted = (f"the {split} file ({' or '.join(TRECQA_XML[split])}; or a folder "
                      f"{' or '.join(TRECQA_TOKS[split])}/)")
            raise DataError(self.missing_message(directory, [wanted]))
        return found[split]

    def expected_files(self) -> list[str]:
        return [("TRAIN-ALL.xml (or TRAIN.xml), DEV.xml, TEST.xml (or jacana's train2393.cleanup.xml, "
                 "*-less-than-40.manual-edit.xml)"),
                "or folders train-all/, raw-dev/, raw-test/ each with a.toks, b.toks, sim.txt, id.txt"]

    def read_file(self, path: Path, split: str) -> Iterator[dict]:
        yield from (self._read_toks(path, split) if path.is_dir() else self._read_xml(path, split))

    def _read_xml(self, path: Path, split: str) -> Iterator[dict]:
        qid = question = None
        pending: str | None = None  # element whose first line (the tokens) comes next
        cands: list[tuple[str, int]] = []
        seen: dict[str, int] = {}
        start = 0
        for lineno, raw in iter_lines(path, split, "<QApairs id='...'> blocks"):
            line = raw.strip()
            if not line:
                continue
            where = f"{path}:{lineno}"
            if pending is not None:
                if line.startswith("<"):
                    raise DataError(f"{where}: <{pending}> has no token line")
                text = " ".join(line.split("\t"))
                if pending == "question":
                    question = text
                else:
                    cands.append((text, self.label_id("1" if pending == "positive" else "0", where)))
                pending = None
                continue
            m = _QAPAIRS.match(line)
            if m:
                if qid is not None:
                    raise DataError(f"{where}: <QApairs> opened before </QApairs> of question {qid!r} "
                                    f"(line {start})")
                qid, question, cands, start = m.group(1), None, [], lineno
            elif line == "</QApairs>":
                if qid is None:
                    raise DataError(f"{where}: </QApairs> without an opening <QApairs id='...'>")
                if question is None:
                    raise DataError(f"{where}: question {qid!r} (line {start}) has no <question>")
                if not cands:
                    log.warning("%s:%d: question %r has no candidates; skipped", path, start, qid)
                seen[qid] = seen.get(qid, 0) + 1
                group = qid if seen[qid] == 1 else f"{qid}#{seen[qid]}"
                for text, label in cands:
                    yield {"text_a": question, "text_b": text, "label": label, "group": group}
                qid = None
            elif line.startswith("<") and not line.startswith("</"):
                tag = line.strip("<>")
                if qid is None:
                    raise DataError(f"{where}: <{tag}> outside a <QApairs> block")
                if tag not in ("question", "positive", "negative"):
                    raise DataError(f"{where}: unknown element <{tag}> for {self.name}; expected <question>, "
                                    "<positive> or <negative> (the candidate's label)")
                pending = tag
            # other lines: closing tags and the POS / dependency / NER lines, not used
        if qid is not None:
            raise DataError(f"{path}: ends inside question {qid!r} (line {start}); </QApairs> missing")

    def _read_toks(self, folder: Path, split: str) -> Iterator[dict]:
        cols = {}
        for name in TOKS_FILES:
            cols[name] = read_lines(folder / name, split, "one candidate per line")
            while cols[name] and not cols[name][-1].strip():
                cols[name].pop()
        lengths = {name: len(v) for name, v in cols.items()}
        if len(set(lengths.values())) != 1:
            raise DataError(f"{folder}: a.toks, b.toks, sim.txt and id.txt must have one line per candidate; "
                            f"got {lengths}")
        for i, (q, a, sim, qid) in enumerate(zip(*(cols[n] for n in TOKS_FILES)), 1):
            if not q.strip() or not a.strip() or not qid.strip():
                raise DataError(f"{folder}: line {i}: empty question, candidate or id")
            yield {"text_a": q, "text_b": a, "label": self.label_id(sim.strip(), f"{folder / 'sim.txt'}:{i}"),
                   "group": qid.strip()}


# ---- Ubuntu Dialogue Corpus v1 ---------------------------------------------------------------------------

UDC_TRAIN_HEADER = ("Context", "Utterance", "Label")
UDC_EVAL_HEADER = ("Context", "Ground Truth Utterance", *(f"Distractor_{i}" for i in range(9)))
UDC_LABELS = {"1": "1", "1.0": "1", "0": "0", "0.0": "0"}


class UdcReader(PairReader):
    """Ubuntu Dialogue Corpus v1 (Lowe et al. 2015), the CSV files of the release:

    - ``train.csv``: ``Context,Utterance,Label`` (label ``1``/``0``, also written ``1.0``/``0.0``): one
      (context, response) pair per row, half of them with a random response; each row is its own group;
    - ``valid.csv``, ``test.csv``: ``Context,Ground Truth Utterance,Distractor_0,...,Distractor_8``: a group of
      ten candidates per row, label 1 for the ground truth (given first), 0 for the distractors (in order).

    Validation and test files must have the ten-candidate header (R10@k needs ten candidates a row); the training
    file may have either. Turn markers ``__eou__`` / ``__eot__`` are kept as tokens. An empty candidate is an error.
    """

    def read_file(self, path: Path, split: str) -> Iterator[dict]:
        train_h, eval_h = ",".join(UDC_TRAIN_HEADER), f"{','.join(UDC_EVAL_HEADER[:3])},...,Distractor_8"
        expected = (f"a CSV header ({train_h} or {eval_h}) and one row per example" if split == "train" else
                    f"the CSV header {eval_h} and one row of ten candidates per context")
        header, rows = read_table(path, split, expected)
        train = tuple(header) == UDC_TRAIN_HEADER
        if tuple(header) != UDC_EVAL_HEADER and not (train and split == "train"):
            wanted = f"{train_h} (train) or {eval_h}" if split == "train" else (
                f"{eval_h} (the {split} split is ranked among ten candidates: the ground truth and nine "
                f"distractors)")
            raise DataError(f"{path}:1: unexpected header {header}{of_split(split)}; expected {wanted}")
        stem = path.stem
        for lineno, row in rows:
            where = f"{path}:{lineno}"
            if not all(c.strip() for c in row):
                raise DataError(f"{where}: empty field in column {header[[c.strip() for c in row].index('')]!r}")
            group = f"{stem}-{lineno}"
            if train:
                label = UDC_LABELS.get(row[2].strip(), row[2].strip())
                yield {"text_a": row[0], "text_b": row[1], "label": self.label_id(label, where), "group": group}
            else:
                for k, cand in enumerate(row[1:]):
                    yield {"text_a": row[0], "text_b": cand, "label": int(k == 0), "group": group}


for _reader in (
    TrecQAReader(
        name="trecqa",
        label_names=("0", "1"),
        files={"train": "TRAIN-ALL.xml", "validation": "DEV.xml", "test": "TEST.xml"},
        hub_id=None,
        source_hint="The XML files come with jacana (Yao et al. 2013; TRAIN-ALL = train2393.cleanup.xml); the "
                    "a.toks/b.toks/sim.txt/id.txt folders with e.g. the Castor/ HyperQA preprocessing of TrecQA.",
    ),
    UdcReader(
        name="udc",
        label_names=("0", "1"),
        files={"train": "train.csv", "validation": "valid.csv", "test": "test.csv"},
        hub_id=None,
        source_hint="Generate them with https://github.com/rkadlec/ubuntu-ranking-dataset-creator (v1 settings) "
                    "or use the released ubuntu_csvfiles (Lowe et al. 2015).",
    ),
):
    register(_reader)
