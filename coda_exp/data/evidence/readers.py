"""The FEVER claim files (Thorne et al. 2018): ``train.jsonl``, ``paper_dev.jsonl``, ``paper_test.jsonl``.

One claim per line: ``id`` (int), ``verifiable`` (VERIFIABLE / NOT VERIFIABLE), ``label`` (SUPPORTS / REFUTES /
NOT ENOUGH INFO), ``claim`` and ``evidence``: a list of evidence sets, each a list of ``[annotation_id,
evidence_id, page, sentence_id]``; NOT ENOUGH INFO claims have ``[[[annotation_id, null, null, null]]]``. The
reader yields ``{"id", "claim", "label" (0, 1, 2), "evidence" (the sets as in the file), "where" (file:line)}``;
the Wikipedia dump is read by :mod:`coda_exp.data.evidence.wiki`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coda_exp.data.common.errors import DataError, require_files
from coda_exp.data.common.files import read_jsonl
from coda_exp.data.common.readers import Reader, get_reader, register

LABELS = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")  # label ids 0, 1, 2
NEI = 2


def _check_evidence(evidence, label: int, where: str) -> None:
    shape = "a list of evidence sets, each a list of [annotation_id, evidence_id, page, sentence_id]"
    if not isinstance(evidence, list) or not evidence or not all(isinstance(g, list) and g for g in evidence):
        raise DataError(f"{where}: field 'evidence' must be {shape}")
    for group in evidence:
        for item in group:
            if not isinstance(item, list) or len(item) != 4:
                raise DataError(f"{where}: evidence item {item!r} is not [annotation_id, evidence_id, page, "
                                "sentence_id]")
            page, line = item[2], item[3]
            if label == NEI:
                continue
            if not isinstance(page, str) or not page or not isinstance(line, int) or isinstance(line, bool) \
                    or line < 0:
                raise DataError(f"{where}: evidence item {item!r} of a {LABELS[label]} claim needs a page name "
                                "and a sentence number >= 0")


@dataclass(frozen=True)
class ClaimReader(Reader):
    """A claim-verification benchmark: its label names and its claim file per split."""

    label_names: tuple[str, ...] = LABELS
    files: dict[str, str] = field(default_factory=dict)

    def splits(self) -> tuple[str, ...]:
        return tuple(self.files)

    def layout(self) -> str:
        return f"the claim files {', '.join(self.files.values())} and the dump wiki-pages/wiki-NNN.jsonl"

    def local_files(self, directory: Path, split: str) -> list[Path]:
        names = list(self.files.values())
        return [require_files(self.name, directory, [self.files[split]], names, self.source_hint)
                / self.files[split]]

    def read_local(self, directory: Path, split: str) -> Iterator[dict]:
        seen: dict[int, str] = {}  # claim id -> where it was first read: retrieval and scores are keyed by id
        for where, row in read_jsonl(self.local_files(directory, split)[0], split):
            if not isinstance(row.get("id"), int) or isinstance(row.get("id"), bool):
                raise DataError(f"{where}: missing or non-integer field 'id'")
            if row["id"] in seen:
                raise DataError(f"{where}: claim id {row['id']} repeats {seen[row['id']]} (evidence and predictions "
                                "are looked up by id: each claim needs its own)")
            seen[row["id"]] = where
            if not isinstance(row.get("claim"), str) or not row["claim"].strip():
                raise DataError(f"{where}: missing or empty field 'claim'")
            if row.get("label") not in self.label_names:
                raise DataError(f"{where}: unknown label {row.get('label')!r}; expected one of "
                                f"{list(self.label_names)}")
            label = self.label_names.index(row["label"])
            _check_evidence(row.get("evidence"), label, where)
            yield {"id": row["id"], "claim": row["claim"], "label": label, "evidence": row["evidence"],
                   "where": where}


def get_claim_reader(name: str) -> ClaimReader:
    return get_reader(name, ClaimReader)


register(ClaimReader(
    name="fever",
    hub_id=None,
    files={"train": "train.jsonl", "validation": "paper_dev.jsonl", "test": "paper_test.jsonl"},
    source_hint="Get them from https://fever.ai/dataset/fever.html (train.jsonl, paper_dev.jsonl, "
                "paper_test.jsonl, wiki-pages.zip).",
))
