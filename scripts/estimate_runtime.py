#!/usr/bin/env python
"""``coda-exp estimate`` from a checkout (coda_exp/tools/estimate.py): how long a run would take here.

    python scripts/estimate_runtime.py task=mlu model=transformer scale=cpu --steps 100

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("estimate", sys.argv[1:] if argv is None else argv, prog="estimate_runtime.py")


if __name__ == "__main__":
    sys.exit(main())
