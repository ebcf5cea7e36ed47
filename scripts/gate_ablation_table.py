#!/usr/bin/env python
"""``coda-exp compare`` from a checkout (coda_exp/tools/compare.py), titled as the MLU gate study's table: per model /
CoDA variant, test accuracy over seeds against a reference, how fast the validation curve rises and where CoDA's gate
ends.

    python scripts/gate_ablation_table.py --runs results --out results/tables/mlu_gate_ablation.md
    python scripts/gate_ablation_table.py --runs results/runs --runs /more/results --task mlu --out ablation.md \\
        [--reference transformer] [--metric test/acc_seq] [--curve-metric val/acc_seq] [--thresholds 0.1 0.3]

On MLU records the command's defaults are the study's: ``test/acc_seq`` (the runs monitor ``val/acc_seq``) against
``transformer`` (the plain model without CoDA). ``--help`` lists the arguments. A thin wrapper, kept for the make
rules and checkouts without ``pip install -e .``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's coda_exp

from coda_exp.commands import run_command


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_command("compare", ["--title", "Gate ablation", *argv], prog="gate_ablation_table.py")


if __name__ == "__main__":
    sys.exit(main())
