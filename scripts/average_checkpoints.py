#!/usr/bin/env python
"""``coda-exp average-checkpoints`` from a checkout (coda_exp/checkpoint_avg.py): average the last N checkpoints (T2T).

    python scripts/average_checkpoints.py --dir RUN/checkpoints --last 5 --out RUN/checkpoints/averaged.ckpt

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("average-checkpoints", sys.argv[1:] if argv is None else argv, prog="average_checkpoints.py")


if __name__ == "__main__":
    sys.exit(main())
