#!/usr/bin/env python
"""``coda-exp yelp-split`` from a checkout (coda_exp/tools/data_files.py): a Yelp split from review.json.

    python scripts/make_yelp_split.py --review-json yelp_dataset/review.json --out-dir data/yelp

``--help`` lists the arguments. A thin wrapper, kept for the make rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    return run_command("yelp-split", sys.argv[1:] if argv is None else argv, prog="make_yelp_split.py")


if __name__ == "__main__":
    sys.exit(main())
