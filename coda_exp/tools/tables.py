"""``coda-exp tables``: regenerate the paper tables from the run records: ``results/tables/<id>.{md,tex,csv}``.

    coda-exp tables                          # every spec in configs/tables
    coda-exp tables --tables table_2 table_3 --print
    coda-exp tables --runs /path/to/runs --out /tmp/tables

(``python scripts/make_tables.py ...`` in a checkout: the same.) The default folders are under the project root
(``paths.root_dir``: ``$CODA_EXP_ROOT``, else the checkout whatever the current folder, else the current folder);
the table specs are the configs' ``tables/``. Corrupt run records are skipped with a warning
(``--strict`` makes them an error); a runs folder that does not exist is an error (a mistyped ``--runs`` would
otherwise rewrite every table with ``no run`` cells), an empty one gives ``no run`` cells. A results folder (no
``*.json`` of its own, a ``runs/`` inside, as ``plot-curves --runs`` takes) is read from its ``runs/``. ``--out``
and ``--predictions`` follow ``--runs``: the ``tables/`` and ``predictions/`` beside its runs folder
(``results/tables`` for ``results/runs``; ``--runs outputs/fixture_results`` writes ``outputs/fixture_results/tables``,
never over the committed tables). A ``--predictions`` given that is no folder is an error (the paired tests would
be left out without a word).

Without ``--tables`` a table that no record would fill (no run of its tasks and rows at all, not even one listed
apart) is not written, and is named as skipped: ``make tables`` writes the tables that have runs, not dozens of
all-``no run`` files. A table named with ``--tables`` is written whatever it holds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coda_exp.environment import config_dir, root_dir
from coda_exp.errors import USER_ERROR_EXIT
from coda_exp.io import output_problem, write_problem
from coda_exp.results import load_records
from coda_exp.table_render import write_tables
from coda_exp.table_spec import load_table_spec
from coda_exp.tables import find_specs, record_matches


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    root = root_dir()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=root / "results" / "runs", help="folder of run records, or a results folder with runs/ (its runs/ is read)")
    parser.add_argument("--specs", type=Path, default=config_dir() / "tables", help="folder of table specs")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: tables/ beside the runs folder: results/tables for results/runs)")
    parser.add_argument("--predictions", type=Path, default=None,
                        help="folder of test predictions for the paired tests, used when a record's own path does not "
                             "exist (default: predictions/ beside the runs folder)")
    parser.add_argument("--tables", nargs="+", metavar="ID",
                        help="only these table ids, written even without a run (default: every table some record "
                             "fills)")
    parser.add_argument("--print", action="store_true", help="also print each table's markdown to stdout")
    parser.add_argument(
        "--strict", action="store_true", help="fail on a corrupt run record instead of skipping"
    )
    return parser.parse_args(argv)


def has_runs(spec_path: Path, records: list[dict]) -> bool:
    """Whether any record is a run of a cell of the table (pooled or listed apart: another configuration, an
    evaluation, a diverged run), by the cells' task, metric and match."""
    spec = load_table_spec(spec_path)
    for row in spec.rows:
        if row.match is None:  # a paper-only row
            continue
        for col in spec.columns:
            match, metric = {**row.match, **col.match}, col.metric_for(row.split)
            for rec in records:
                if rec.get("status") == "diverged":  # no test metrics: listed under the table by task and match
                    rec = {**rec, "metrics": {metric: None}}
                if record_matches(rec, col.task, metric, match):
                    return True
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec_paths = find_specs(args.specs)
    if not spec_paths:
        print(f"error: no table specs (*.yaml) in {args.specs}", file=sys.stderr)
        return USER_ERROR_EXIT
    if args.tables:
        by_id = {p.stem: p for p in spec_paths}
        unknown = [t for t in args.tables if t not in by_id]
        if unknown:
            print(f"error: unknown table id(s) {unknown}; known: {sorted(by_id)}", file=sys.stderr)
            return USER_ERROR_EXIT
        spec_paths = [by_id[t] for t in dict.fromkeys(args.tables)]
    if args.runs.exists() and not args.runs.is_dir():  # a record or a checkpoint given for the folder
        hint = f", e.g. {args.runs.parent}" if args.runs.suffix == ".json" else ""
        print(f"error: --runs {args.runs}: a file, not a folder; expected the folder of run records (results/runs, or "
              f"a results folder with runs/ inside{hint}; nothing was written)", file=sys.stderr)
        return USER_ERROR_EXIT
    if not args.runs.is_dir():
        print(f"error: --runs {args.runs}: no such folder of run records (training runs write theirs to "
              "results/runs; nothing was written)", file=sys.stderr)
        return USER_ERROR_EXIT
    if not any(args.runs.glob("*.json")) and (args.runs / "runs").is_dir():  # a results folder, as plot-curves takes
        print(f"--runs {args.runs}: a results folder: reading its runs/ ({args.runs / 'runs'})", file=sys.stderr)
        args.runs = args.runs / "runs"
    if args.predictions is not None and not args.predictions.is_dir():  # a mistyped one: paired tests dropped silently
        what = "a file, not a folder" if args.predictions.exists() else "no such folder"
        print(f"error: --predictions {args.predictions}: {what}; expected the folder of test predictions "
              f"(<run_id>.jsonl.gz, results/predictions; nothing was written)", file=sys.stderr)
        return USER_ERROR_EXIT
    if args.out is None:  # beside the records, never the committed results/tables for another folder's runs
        args.out = args.runs.parent / "tables"
    wrong = output_problem("--out", args.out, "the tables (<id>.md, .tex, .csv)", folder=True)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return USER_ERROR_EXIT
    try:
        records = load_records(args.runs, strict=args.strict)
        if not args.tables:  # every table: those no record fills are left out (a named one is written)
            empty = [p for p in spec_paths if not has_runs(p, records)]
            spec_paths = [p for p in spec_paths if p not in empty]
            if empty:
                print(f"skipped {len(empty)} table(s) without any run in {args.runs}: "
                      f"{' '.join(p.stem for p in empty)} (--tables ID writes one anyway)", file=sys.stderr)
        predictions = args.predictions or args.runs.parent / "predictions"
        written = write_tables(spec_paths, records, args.out, predictions_dir=predictions)
    except ValueError as err:  # a corrupt record under --strict, a bad spec: the user's input
        print(f"error: {err}", file=sys.stderr)
        return USER_ERROR_EXIT
    except OSError as err:  # the tables' folder: no permission, a full disk
        print(f"error: {write_problem('--out', args.out, 'the tables', err)}", file=sys.stderr)
        return USER_ERROR_EXIT
    for path in written:
        print(path)
    if args.print:
        for path in written:
            if path.suffix == ".md":
                print()
                print(path.read_text(encoding="utf-8"), end="")
    print(
        f"{len(written)} file(s) from {len(spec_paths)} table(s) and {len(records)} run record(s)",
        file=sys.stderr,
    )
    return 0
