#!/usr/bin/env python
"""``coda-exp plot-curves`` from a checkout (coda_exp/tools/plot_curves.py): validation curves of run records, to PNG.

    python scripts/plot_learning_curves.py --runs results --table table_6 --out curves.png

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("plot-curves", sys.argv[1:] if argv is None else argv, prog="plot_learning_curves.py")


if __name__ == "__main__":
    sys.exit(main())
