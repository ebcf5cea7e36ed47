#!/usr/bin/env python
"""``coda-exp tables`` from a checkout (coda_exp/tools/tables.py): the paper tables from the run records.

    python scripts/make_tables.py                      # every table, into results/tables/
    python scripts/make_tables.py --tables table_2 --print

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("tables", sys.argv[1:] if argv is None else argv, prog="make_tables.py")


if __name__ == "__main__":
    sys.exit(main())
