#!/usr/bin/env python
"""MLU test accuracy per operation: which of x+y, x−y and x×y each model / CoDA variant has learnt.

    python scripts/mlu_breakdown.py --runs results/mlu_gate_ablation --out results/mlu_gate_ablation/tables/by_operation.md
    python scripts/mlu_breakdown.py --runs results/runs --runs more/results --out by_operation.md [--group model]

Reads every MLU record of each ``--runs`` folder (its ``runs/`` subfolder when there is one) and the record's saved
test predictions (``<folder>/predictions/<run_id>.jsonl.gz``, the layout runs write), rebuilds the test stream the
run was scored on (``MLUStream("test")`` with the record's ``data_seed`` and test size: generated data only) and
counts exact answers per operation (``+``: x+y and y+x, ``−``: x−y and y−x, ``×``: x*y and y*x). Every record's
recount must give back its ``test/acc_seq``, or the script stops naming the run. One row per group
(``coda_exp.curves.group_label``) and scale: the mean over seeds (latest run per seed) and each seed's value.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

from coda_exp.curves import GROUP_BY, group_label, latest_per_seed, runs_folder
from coda_exp.data.seq2seq.mlu import MLUStream
from coda_exp.figures import display_labels
from coda_exp.io import atomic_write_text
from coda_exp.results import load_records
from coda_exp.significance import read_predictions

OPERATIONS = {"+": "x+y, y+x", "-": "x−y, y−x", "*": "x×y, y×x"}


@lru_cache(maxsize=8)
def test_sources(num_examples: int, seed: int) -> tuple[str, ...]:
    """The sources of the generated MLU test stream, in the order its predictions are indexed."""
    return tuple(ex["src"] for ex in MLUStream("test", num_examples=num_examples, seed=seed, shard=(0, 1)))


def operation(src: str) -> str:
    """``y=691,x=-999,y*x`` -> ``*``."""
    return src.rsplit(",", 1)[1][1]


def accuracy_by_operation(record: dict, predictions: Path) -> dict[str, float]:
    """Exact-match rate per operation (and ``all``) of one run from its saved test predictions."""
    data = record.get("data") or {}
    if data.get("source") != "generated":
        raise ValueError(f"run {record['run_id']}: per-operation accuracy needs generated MLU data, the record says "
                         f"data.source={data.get('source')!r}")
    if not predictions.is_file():
        raise ValueError(f"run {record['run_id']}: no test predictions at {predictions}")
    sources = test_sources(int(data["test_examples"]), int(data["data_seed"]))
    right, total = defaultdict(int), defaultdict(int)
    for row in read_predictions(predictions):
        index = int(row["index"])
        if not 0 <= index < len(sources):
            raise ValueError(f"{predictions}: index {index} outside the {len(sources)}-example test stream")
        for key in (operation(sources[index]), "all"):
            total[key] += 1
            right[key] += bool(row["exact"])
    out = {key: right[key] / total[key] for key in total}
    recorded = (record.get("metrics") or {}).get("test/acc_seq")
    if recorded is not None and not math.isclose(out["all"], recorded, abs_tol=1e-6):
        raise ValueError(f"run {record['run_id']}: its predictions give test acc_seq {out['all']:.6f}, its record "
                         f"says {recorded:.6f} ({predictions})")
    return out


def collect(folders: list[Path], group_by: str = "attention-variant") -> dict[tuple[str, str], dict[int, dict]]:
    """{(scale, group): {seed: per-operation accuracy}} over the MLU records of ``folders`` (latest run per seed)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    predictions: dict[str, Path] = {}  # run id -> its saved test predictions
    for folder in folders:
        runs = runs_folder(folder)
        for record in load_records(runs):
            if record["task"] != "mlu" or record["run_id"] in predictions:
                continue
            predictions[record["run_id"]] = runs.parent / "predictions" / f"{record['run_id']}.jsonl.gz"
            groups[(str(record["scale"]), group_label(record, group_by))].append(record)
    return {key: {int(r["seed"]): accuracy_by_operation(r, predictions[r["run_id"]])
                  for r in latest_per_seed(records)[0]} for key, records in sorted(groups.items())}


def render(groups: dict[tuple[str, str], dict[int, dict]], source: str = "") -> str:
    lines = ["# MLU test accuracy per operation (acc_seq, %)", ""]
    if source:
        lines += [f"From {source}, written by `scripts/mlu_breakdown.py`.", ""]
    lines += ["| scale | group | n | " + " | ".join(OPERATIONS.values()) + " | all |",
              "| --- | --- | ---: | " + " | ".join("---" for _ in OPERATIONS) + " | --- |"]
    names = display_labels([group for _, group in groups])  # beta=0.177, unless two groups would then read alike
    for (scale, group), seeds in groups.items():
        cells = []
        for key in (*OPERATIONS, "all"):
            values = [acc.get(key, math.nan) * 100 for acc in seeds.values()]
            per_seed = " / ".join(f"{v:.1f}" for v in values)
            cells.append(f"**{sum(values) / len(values):.1f}** ({per_seed})" if len(values) > 1 else f"{values[0]:.1f}")
        lines.append(f"| {scale} | {names[group]} | {len(seeds)} | " + " | ".join(cells) + " |")
    lines += ["", "Mean over seeds in bold, then each seed's value (seeds in increasing order)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, action="append", required=True,
                        help="a folder of run records, or a results folder with runs/ and predictions/ (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="the Markdown file to write")
    parser.add_argument("--group", choices=GROUP_BY, default="attention-variant")
    args = parser.parse_args(argv)
    try:
        groups = collect(args.runs, args.group)
        if not groups:
            raise ValueError(f"no MLU run record in {', '.join(map(str, args.runs))}")
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(atomic_write_text(args.out, render(groups, f"the MLU records in {', '.join(map(str, args.runs))}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
