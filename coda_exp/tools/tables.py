"""``coda-exp tables``: regenerate the paper tables from the run records: ``results/tables/<id>.{md,tex,csv}``.

    coda-exp tables                          # every spec in configs/tables
    coda-exp tables --tables table_2 table_3 --print
    coda-exp tables --runs /path/to/runs --out /tmp/tables

(``python scripts/make_tables.py ...`` in a checkout: the same.) The default folders are under the project root
(``paths.root_dir``: ``$CODA_EXP_ROOT``, else the checkout when run inside it, else the current folder);
the table specs are the configs' ``tables/``. Corrupt run records are skipped with a warning
(``--strict`` makes them an error); a runs folder that does not exist is an error (a mistyped ``--runs`` would
otherwise rewrite every table with ``no run`` cells), an empty one gives ``no run`` cells. A results folder (no
``*.json`` of its own, a ``runs/`` inside, as ``plot-curves --runs`` takes) is read from its ``runs/``. ``--out``
and ``--predictions`` follow ``--runs``: the ``tables/`` and ``predictions/`` beside its runs folder
(``results/tables`` for ``results/runs``; ``--runs outputs/fixture_results`` writes ``outputs/fixture_results/tables``,
never over the committed tables). A ``--predictions`` given that is no folder is an error (the paired tests would
be left out without a word).

Every table is built first, then written or not. Without ``--tables`` a table that no record fills (neither a run
pooled in a cell nor one listed apart under it) is not written, and is named as skipped: ``make tables`` writes the
tables that have runs, not dozens of all-``no run`` files. A table whose only runs are listed apart (another
configuration, an evaluation that does not count, a diverged run, a record contradicting itself) is written, its
cells ``no run`` and its notes naming each run and why, and the console says so in one line: no run fits its grid,
and how many runs are listed apart. A table named with ``--tables`` is written whatever it holds; one of no run at
all says so in one line. A table's warnings (a record without a fingerprint...) are given only when it is written.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from coda_exp.environment import config_dir, root_dir
from coda_exp.errors import USER_ERROR_EXIT
from coda_exp.io import output_problem, write_problem
from coda_exp.results import load_records, utc_now_iso
from coda_exp.table_notes import ANOTHER_CONFIGURATION, listed_apart
from coda_exp.table_render import load_specs, write_table
from coda_exp.tables import NO_RUN, Table, TableSpec, build_table, find_specs


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


def build(spec: TableSpec, records: list[dict], generated: str, predictions: Path) -> tuple[Table, list]:
    """The table of ``spec`` and the warnings its building gave, held back (``warnings.WarningMessage``): a table
    that is not written must not warn (a record without a fingerprint would be named once per shipped table)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every one kept here; the caller's filters apply when they are given again
        table = build_table(spec, records, generated=generated, predictions_dir=predictions)
    return table, caught


def has_runs(table: Table) -> bool:
    """Whether any record is a run of a cell of the table: pooled, or listed apart under it (another configuration,
    an evaluation, a diverged or superseded run, a record contradicting itself: :mod:`coda_exp.table_notes`)."""
    return table.records_used > 0 or bool(listed_apart(table))


def pooled_none(table: Table, runs: Path) -> str | None:
    """The console line of a table that pools no run (every cell says ``no run``): whether the records hold no run
    of its cells at all, or only runs listed apart under it, and how many of each kind; None when a cell pools."""
    if table.records_used:
        return None
    apart = listed_apart(table)
    if not apart:
        return f"{table.spec.id}: no run of its cells in {runs}: every cell says `{NO_RUN}`"
    configuration = sum(reason == ANOTHER_CONFIGURATION for reason in apart.values())
    kinds = [f"{n} {what}" for n, what in ((configuration, "of another configuration"),
                                          (len(apart) - configuration, "not pooled for another reason"))
             if n]
    head = "no run fits its grid" if configuration == len(apart) else "no run is pooled"
    return (f"{table.spec.id}: {head}: every cell says `{NO_RUN}`; {len(apart)} run(s) listed apart under the table "
            f"({', '.join(kinds)}; its notes say why)")


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
        generated, predictions = utc_now_iso(), args.predictions or args.runs.parent / "predictions"
        built = [build(spec, records, generated, predictions) for spec in load_specs(spec_paths)]
        if not args.tables:  # every table: those no record fills are left out (a named one is written)
            kept = [has_runs(table) for table, _ in built]
            empty = [table.spec.id for (table, _), keep in zip(built, kept) if not keep]
            built = [pair for pair, keep in zip(built, kept) if keep]
            if empty:
                print(f"skipped {len(empty)} table(s) without any run in {args.runs}: "
                      f"{' '.join(empty)} (--tables ID writes one anyway)", file=sys.stderr)
        written = []
        for table, caught in built:
            for w in caught:  # the warnings of a table that is written, as they were given
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
            line = pooled_none(table, args.runs)
            if line:
                print(line, file=sys.stderr)
            written += write_table(table, args.out)
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
        f"{len(written)} file(s) from {len(built)} table(s) and {len(records)} run record(s)",
        file=sys.stderr,
    )
    return 0
