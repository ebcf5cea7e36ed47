#!/usr/bin/env python
"""``coda-exp plot-attconv`` from a checkout (coda_exp/tools/plot_attconv.py): AttConv Figures 5 and 8 from saved predictions.

    python scripts/plot_attconv.py --figure 5 --records results/runs/*yelp_attconv*.json

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("plot-attconv", sys.argv[1:] if argv is None else argv, prog="plot_attconv.py")


if __name__ == "__main__":
    sys.exit(main())
