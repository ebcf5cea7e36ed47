#!/usr/bin/env python
"""Write the MLU dataset (CoDA Table 6) as T2T-style text files: train.txt, dev.txt, test.txt (``input:target``).

Defaults are the paper's size: 12M pairs with 1/11 held out (10,909,091 train; 545,454 dev; 545,455 test), about
7 s per million lines on one core. The same seed always writes the same files; the split of every example is
fixed (independent of the seed), so no seed's train.txt shares an example with any seed's dev.txt or test.txt.

    python scripts/make_mlu.py --out-dir data/mlu
    python scripts/make_mlu.py --out-dir /tmp/mlu_small --num-train 100000 --num-dev 2000 --num-test 2000
"""

from __future__ import annotations

import argparse
import time

from coda_exp.data.seq2seq.mlu import (
    MLU_DEFAULT_SEED,
    MLU_PAPER_TEST,
    MLU_PAPER_TRAIN,
    MLU_PAPER_VALIDATION,
    write_mlu_files,
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True, help="directory to write train.txt, dev.txt, test.txt into")
    parser.add_argument("--num-train", type=int, default=MLU_PAPER_TRAIN)
    parser.add_argument("--num-dev", type=int, default=MLU_PAPER_VALIDATION)
    parser.add_argument("--num-test", type=int, default=MLU_PAPER_TEST)
    parser.add_argument("--seed", type=int, default=MLU_DEFAULT_SEED, help="data seed (which examples, in which order)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    paths = write_mlu_files(args.out_dir, args.num_train, args.num_test, args.seed, num_dev=args.num_dev)
    for split, path in paths.items():
        print(f"{split:>10}: {path}")
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
