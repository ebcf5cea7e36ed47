#!/usr/bin/env python
"""``coda-exp make-mlu`` from a checkout (coda_exp/tools/data_files.py): the MLU data files (CoDA Table 6).

    python scripts/make_mlu.py --out-dir data/mlu

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("make-mlu", sys.argv[1:] if argv is None else argv, prog="make_mlu.py")


if __name__ == "__main__":
    sys.exit(main())
