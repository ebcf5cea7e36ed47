#!/usr/bin/env python
"""Write ``results/README.md``: every folder of ``results/``, the question it answers, the command that made it,
whether it is current or superseded, and, read off its run records, how many runs, from which commits and scales.

    python scripts/results_index.py [--results results] [--check]

The question, command and status of each folder are stated here (``FOLDERS``: what a record cannot say); the rest
is generated. A folder this script does not know is listed with what its records say and "(not described yet)".
``--check`` writes nothing and exits 1 when the committed index differs from what it would write (a test runs it).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coda_exp.results import load_records

# folder -> (question, command, status); "." is results/ itself (runs/, predictions/, tables/, figures/)
FOLDERS = {
    ".": ("The main job: CoDA Table 6 (MLU) at CPU scale, Transformer vs CoDA Transformer, seed 1",
          "`make run`", "current"),
    "bench": (("How fast are Flash-CoDA, the fast path's levers and the KeOps peer? (benchmark records, each naming "
              "device, versions and commit)"), ("`make bench`, `scripts/bench_attention.py --sweep/--train-step`, "
              "`scripts/bench_fast_path.py`, `scripts/gpu_session_coda.sh` (on a GPU: `check_flash_triton.py`, `bench_flash_kernels.py`, `check_cuda_coda.py`, `bench_gpu_coda.py`), `scripts/sass_flash_kernels.py --json` "
              "(SASS counts, no GPU)"), "current"),
    "mlu_recipe_probes": (("Which peak learning rate lets the Transformer learn MLU within 2500 CPU steps? (chose the "
                          "CPU recipe)"), "`train.py task=mlu scale=cpu task.cpu_scheduler.peak_lr=...` (README)",
                          "current"),
    "mlu_gate_ablation": ("Why does CoDA lag on MLU? Five gate readings x 3 seeds at the CPU recipe",
                          "`make mlu-gate-ablation`", ("current (its CoDA eq. 10 seed-1 record ran on 2 torch "
                          "threads: see the top-level records for the pinned one)")),
    "mlu_gate_ablation_10k": ("The gate study again at 10K steps (one H100)", "`make mlu-studies-gpu`", "current"),
    "mlu_coda_peak_lr": ("Does the CoDA Transformer want another peak learning rate?",
                         "`train.py experiment=mlu_gate_ablation scale=cpu model=coda_transformer seed=1 task.cpu_scheduler.peak_lr=4.0e-3 paths.results_dir=results/mlu_coda_peak_lr`",
                         "current"),
    "mlu_coda_recipe_probes": (("Can a recipe change make CoDA learn within `make run`'s budget? And both models at "
                               "5000 steps (the README's 59.5 / 30.85 %)"), ("`make mlu-studies-gpu` (probes), "
                               "`train.py -m experiment=table_6 scale=cpu task.max_steps=5000 ...`"), "current"),
    "mlu_gate_ablation_first_recipe": ("The gate study at the first CPU recipe (peak 3e-3)",
                                       "`make mlu-gate-ablation` at commit d9922f2",
                                       "superseded by mlu_gate_ablation (the current recipe)"),
    "mlu_10k_steps": ("Transformer vs CoDA at 10K steps on the first CPU recipe, seeds 1-4",
                      "`train.py -m experiment=table_6 scale=cpu task.max_steps=10000 ...`",
                      "superseded by mlu_gate_ablation_10k (the current recipe)"),
    "table_6_gpu": ("CoDA Table 6 at the paper's scale (100K steps x 3 seeds) on one GPU, fast path",
                    "`make reproduce-table-6-gpu`", "current"),
}
SKIP = {"runs", "predictions", "tables", "figures"}  # the top-level run folders: described as "."


def summary(folder: Path) -> str:
    runs = folder / "runs"
    if not runs.is_dir():
        files = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != "README.md")
        return ", ".join(files) if files else "no records"
    records = load_records(runs)
    if not records:
        return "no records"
    commits = Counter(str(r.get("git_commit")) for r in records)
    dirty = sum(n for c, n in commits.items() if c.endswith("-dirty"))
    scales = Counter(r["scale"] for r in records)
    models = Counter(r["model"] for r in records)
    return (f"{len(records)} runs; commits {', '.join(sorted(commits))}" + (f" ({dirty} dirty)" if dirty else "")
            + f"; {', '.join(f'{m} x{n}' for m, n in sorted(models.items()))}; scale "
            + "; ".join(f"{s} x{n}" for s, n in sorted(scales.items())))


def render(results: Path) -> str:
    lines = ["# What is in `results/`", "",
             ("Written by `scripts/results_index.py` (`make results-index`); a test checks it is current. Each row: "
             "the question the folder answers, the command that made it, whether it is current, and what its run "
             "records say. A study folder's own README has its reading."), "",
             "| folder | question | command | status | records |", "| --- | --- | --- | --- | --- |"]
    folders = ["."] + sorted(p.name for p in results.iterdir() if p.is_dir() and p.name not in SKIP)
    for name in folders:
        question, command, status = FOLDERS.get(name, ("(not described yet)", "", ""))
        path = results if name == "." else results / name
        shown = "`results/` (runs, predictions, tables, figures)" if name == "." else f"`{name}/`"
        if (path / "README.md").is_file() and name != ".":
            shown = f"[`{name}/`]({name}/README.md)"
        lines.append(f"| {shown} | {question} | {command} | {status} | {summary(path)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    from coda_exp.environment import root_dir

    parser.add_argument("--results", type=Path, default=root_dir() / "results",
                        help="the results folder to index (default: results/ of the root folder, CODA_EXP_ROOT's)")
    parser.add_argument("--check", action="store_true", help="compare with the committed index, write nothing")
    args = parser.parse_args(argv)
    text = render(args.results)
    index = args.results / "README.md"
    if args.check:
        current = index.read_text(encoding="utf-8") if index.is_file() else ""
        if current != text:
            print(f"{index} is not current: run python scripts/results_index.py", file=sys.stderr)
            return 1
        return 0
    index.write_text(text, encoding="utf-8")
    print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
