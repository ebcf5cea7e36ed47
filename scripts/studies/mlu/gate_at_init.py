#!/usr/bin/env python
"""CoDA's gate at initialisation, per layer and per model variant, on a real batch (docs/transformer.md).

For each model it builds the network of ``train.py task=... model=...`` (seeded), takes the first training batch,
runs one forward with the gate-statistics hooks of ``coda_exp.callbacks.GateStats`` on (every example of the batch)
and prints, per CoDA attention layer, the mean gate g·f_N(N) over the valid pairs and the fraction of pairs with
gate < 0.01, as markdown. Nothing is trained and nothing is written to results/ unless ``--out`` is given.

    python scripts/studies/mlu/gate_at_init.py --models coda_transformer,coda_transformer_center_n task=mlu scale=cpu
    python scripts/studies/mlu/gate_at_init.py --out results/mlu_gate_ablation/tables/gate_at_init.md task=mlu scale=cpu
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

MODELS = "coda_transformer,coda_transformer_center_n,coda_transformer_beta_dk,coda_transformer_t2t"


def measure(model_name: str, overrides: list[str], seed: int) -> dict[str, tuple[float, float]]:
    """{layer: (mean gate, fraction < 0.01)} at initialisation for ``model=model_name`` + ``overrides``."""
    import torch

    from coda_exp import offline
    from coda_exp.callbacks import GateStats

    _, datamodule, task = offline.build_offline([f"model={model_name}", f"seed={seed}", *overrides],
                                                 prefix="coda-gate-init-")
    batch = next(iter(datamodule.train_dataloader()))
    callback = GateStats(every_n_steps=1, max_examples=10 ** 9)
    callback._layers = callback.coda_layers(task)
    if not callback._layers:
        raise SystemExit(f"model={model_name} has no CoDA attention layer")
    callback.on_train_batch_start(SimpleNamespace(global_step=0, loggers=[]), task, batch, 0)
    with torch.no_grad():
        task.training_step(batch, 0)
    callback.on_train_batch_end(SimpleNamespace(global_step=1, loggers=[]), task, None, batch, 0)
    return {layer: (series["mean"][0], series[GateStats.FRACTION][0]) for layer, series in callback.series.items()}


def table(results: dict[str, dict[str, tuple[float, float]]]) -> str:
    """Markdown: one row per layer, one (mean gate / fraction < 0.01) column per model."""
    models = list(results)
    layers = list(dict.fromkeys(layer for per in results.values() for layer in per))
    lines = ["| layer | " + " | ".join(models) + " |", "| --- |" + " --- |" * len(models)]
    for layer in layers:
        cells = [f"{results[m][layer][0]:.3f} / {results[m][layer][1]:.2f}" if layer in results[m] else "—"
                 for m in models]
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS, help=f"comma-separated model configs (default {MODELS})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the markdown table here")
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. task=mlu scale=cpu")
    args = parser.parse_args()
    from coda_exp.results import git_commit

    results = {name: measure(name, args.overrides, args.seed) for name in args.models.split(",")}
    text = ("Gate at initialisation: mean g·f_N(N) over the valid pairs / fraction of pairs with gate < 0.01, "
            f"first training batch, seed {args.seed}, overrides: {' '.join(args.overrides) or '(none)'}, "
            f"commit {git_commit(ROOT)}\n\n" + table(results))
    print(text)
    if args.out:
        from coda_exp.io import atomic_write_text

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(args.out), text)


if __name__ == "__main__":
    main()
