"""Data files a benchmark needs and no one distributes: MLU's (``coda-exp make-mlu``) and a Yelp split
(``coda-exp yelp-split``); ``python scripts/make_mlu.py`` and ``scripts/make_yelp_split.py`` in a checkout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from coda_exp.data.common.errors import DataError
from coda_exp.errors import USER_ERROR_EXIT

MLU_DOC = """Write the MLU dataset (CoDA Table 6) as T2T-style text files: train.txt, dev.txt, test.txt
(``input:target``). Defaults are the paper's size: 12M pairs with 1/11 held out (10,909,091 train; 545,454 dev;
545,455 test), about 7 s per million lines on one core. The same seed always writes the same files; the split of
every example is fixed (independent of the seed), so no seed's train.txt shares an example with any seed's
dev.txt or test.txt.

    coda-exp make-mlu --out-dir data/mlu
    coda-exp make-mlu --out-dir /tmp/mlu_small --num-train 100000 --num-dev 2000 --num-test 2000
"""

YELP_DOC = """Regenerate a Yelp split of Lin et al. (2017)'s sizes (500,000 / 2,000 / 2,000 reviews) from the
Yelp Dataset Challenge's ``review.json`` (AttConv paper Table 3). Lin et al.'s own split files are not public,
so numbers on a regenerated split are not on the paper's test set (docs/yelp.md). Writes ``yelp_train_500k``,
``yelp_valid_2000`` and ``yelp_test_2000`` into ``--out-dir``, one review a line, ``<stars> <tokens ...>``: the
review's words and punctuation marks as coda_exp.data.common.vocab.tokenize splits them, case kept (the data
module lower-cases, as the authors' loader does), line breaks gone. The reviews of each split are a random
sample drawn with ``--seed`` (Python's ``random.Random(seed).sample``), written in review.json's order; the same
file and seed always give the same files. Each file is written atomically.

    coda-exp yelp-split --review-json yelp_dataset/review.json --out-dir data/yelp
    coda-exp yelp-split --review-json review.json --out-dir /tmp/yelp_small --train 20000
"""


def count(text: str, least: int = 0) -> int:
    """An argparse type: a number of examples (an int >= ``least``, 0 by default)."""
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a number of examples (an int >= {least}), got {text!r}")
    return value


def split_size(text: str) -> int:
    """An argparse type: the size of a split a training run reads (an int >= 1: an empty split is refused)."""
    return count(text, 1)


def make_folder(option: str, path: str | Path) -> str | None:
    """Make ``path`` (and its parents) a folder to write into; None, or the one-line error naming ``option``:
    a file in its place, or the OSError that making it met (no permission, a read-only or virtual filesystem)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return f"error: {option} {path}: exists and is not a folder"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(path) else ""
        return f"error: {option} {path}: cannot make the folder: {err.strerror or err}{where}"
    return None


def mlu_main(argv: list[str] | None = None) -> int:
    from coda_exp.data.seq2seq.mlu import (
        MLU_DEFAULT_SEED,
        MLU_PAPER_TEST,
        MLU_PAPER_TRAIN,
        MLU_PAPER_VALIDATION,
        write_mlu_files,
    )

    parser = argparse.ArgumentParser(description=MLU_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True, help="directory to write train.txt, dev.txt, test.txt into")
    parser.add_argument("--num-train", type=count, default=MLU_PAPER_TRAIN)
    parser.add_argument("--num-dev", type=count, default=MLU_PAPER_VALIDATION)
    parser.add_argument("--num-test", type=count, default=MLU_PAPER_TEST)
    parser.add_argument("--seed", type=int, default=MLU_DEFAULT_SEED, help="data seed (which examples, in which order)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        paths = write_mlu_files(args.out_dir, args.num_train, args.num_test, args.seed, num_dev=args.num_dev)
    except OSError as err:  # a folder that cannot be made or written: the message names it
        print(f"error: --out-dir {args.out_dir}: {err.strerror or err} ({err.filename or args.out_dir})",
              file=sys.stderr)
        return USER_ERROR_EXIT
    for split, path in paths.items():
        print(f"{split:>10}: {path}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


def progress(iterator, total):
    from tqdm import tqdm  # a dependency of pytorch-lightning

    return tqdm(iterator, total=total, unit=" reviews", desc="writing" if total else "counting", file=sys.stderr,
                mininterval=1.0)


def yelp_main(argv: list[str] | None = None) -> int:
    from coda_exp.data.text.yelp import write_split

    ap = argparse.ArgumentParser(description=YELP_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--review-json", required=True, help="the Yelp Dataset Challenge's review.json (JSON lines)")
    ap.add_argument("--out-dir", required=True, help="folder to write the three split files into")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random split (default 1234)")
    ap.add_argument("--train", type=split_size, default=500_000, help="reviews in yelp_train_500k (>= 1)")
    ap.add_argument("--valid", type=split_size, default=2000, help="reviews in yelp_valid_2000 (>= 1)")
    ap.add_argument("--test", type=split_size, default=2000, help="reviews in yelp_test_2000 (>= 1)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    problem = make_folder("--out-dir", args.out_dir)  # before the passes over review.json, not after them
    if problem:
        print(problem, file=sys.stderr)
        return USER_ERROR_EXIT
    try:
        paths = write_split(args.review_json, args.out_dir, (args.train, args.valid, args.test), args.seed,
                            None if args.no_progress else progress)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return USER_ERROR_EXIT
    except OSError as err:  # a file that cannot be written in --out-dir: the message names it
        print(f"error: --out-dir {args.out_dir}: {err.strerror or err} ({err.filename or args.out_dir})",
              file=sys.stderr)
        return USER_ERROR_EXIT
    for p in paths:
        print(p)
    return 0
