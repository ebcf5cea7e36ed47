#!/usr/bin/env python
"""Regenerate a Yelp split of Lin et al. (2017)'s sizes (500,000 / 2,000 / 2,000 reviews) from the Yelp Dataset
Challenge's ``review.json`` (AttConv paper Table 3). Lin et al.'s own split files are not public, so numbers on a
regenerated split are not on the paper's test set (docs/yelp.md).

Writes ``yelp_train_500k``, ``yelp_valid_2000`` and ``yelp_test_2000`` into ``--out-dir``, one review a line,
``<stars> <tokens ...>``: the review's words and punctuation marks as coda_exp.data.common.vocab.tokenize splits
them, case kept (the data module lower-cases, as the authors' loader does), line breaks gone. The reviews of
each split are a random sample drawn with ``--seed`` (Python's ``random.Random(seed).sample``), written in
review.json's order; the same file and seed always give the same files. Each file is written atomically.

    python scripts/make_yelp_split.py --review-json yelp_dataset/review.json --out-dir data/yelp
    python scripts/make_yelp_split.py --review-json review.json --out-dir /tmp/yelp_small --train 20000
"""

from __future__ import annotations

import argparse
import sys

from coda_exp.data.common.errors import DataError
from coda_exp.data.text.yelp import write_split


def progress(iterator, total):
    from tqdm import tqdm  # a dependency of pytorch-lightning

    return tqdm(iterator, total=total, unit=" reviews", desc="writing" if total else "counting", file=sys.stderr,
                mininterval=1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--review-json", required=True, help="the Yelp Dataset Challenge's review.json (JSON lines)")
    ap.add_argument("--out-dir", required=True, help="folder to write the three split files into")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random split (default 1234)")
    ap.add_argument("--train", type=int, default=500_000)
    ap.add_argument("--valid", type=int, default=2000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        paths = write_split(args.review_json, args.out_dir, (args.train, args.valid, args.test), args.seed,
                            None if args.no_progress else progress)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
