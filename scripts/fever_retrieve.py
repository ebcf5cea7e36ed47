#!/usr/bin/env python
"""``coda-exp fever-retrieve`` from a checkout (coda_exp/tools/fever.py): FEVER evidence for every claim, and its recall.

    python scripts/fever_retrieve.py --data data/fever [--cache cache]

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("fever-retrieve", sys.argv[1:] if argv is None else argv, prog="fever_retrieve.py")


if __name__ == "__main__":
    sys.exit(main())
