"""The commands a user runs besides training (``coda-exp <command>``, listed by ``coda-exp --help``): tables, plots,
data preparation, FEVER's index, run-time estimates. Each module's ``main(argv) -> int`` parses its own arguments;
``coda_exp.cli`` dispatches to it, and a checkout's script of a command (docs/running.md names them) is a thin
wrapper around the same function. The top layer: nothing in ``coda_exp`` imports it but the entry point (``tests/test_layering.py``)."""
