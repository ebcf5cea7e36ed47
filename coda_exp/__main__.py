"""``python -m coda_exp task=snli model=decompatt [key=value ...]``: the ``coda-exp`` entry point."""

from coda_exp.cli import main

main()
