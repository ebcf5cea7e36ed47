#!/usr/bin/env python
"""``coda-exp plot-coda`` from a checkout (coda_exp/tools/plot_coda.py): CoDA Figure 2 from a trained model.

    python scripts/plot_coda.py --record results/runs/<run-id>.json

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("plot-coda", sys.argv[1:] if argv is None else argv, prog="plot_coda.py")


if __name__ == "__main__":
    sys.exit(main())
