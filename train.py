#!/usr/bin/env python
"""Train, validate and test one task x model: python train.py task=snli model=decompatt [key=value ...]

Sweeps: python train.py -m task=snli,wikiqa model=decompatt,decompatt_coda seed=1,2,3
The same entry point as the installed ``coda-exp`` command (coda_exp/cli.py).
"""

from coda_exp.cli import main

if __name__ == "__main__":
    main()
