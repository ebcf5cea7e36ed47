#!/usr/bin/env python
"""Figure 2 of the CoDA paper: histograms of tanh(E), sigmoid(N) and M of a trained model, to PNG.

    python scripts/plot_coda.py --ckpt outputs/runs/wikiqa-decompatt_coda/<time>-s1/checkpoints/last.ckpt
    python scripts/plot_coda.py --record results/runs/<run-id>.json        # its best checkpoint

The run is rebuilt from the ``config_resolved.yaml`` of its output folder; the matrices are collected over the
real (non-padding) token pairs of up to ``--batches`` validation batches. The paper's observations (d = 200):
sigmoid(N) saturates at {0, 1}; tanh(E) concentrates around 0 with both signs; M follows tanh(E) with more mass
near 0. The gate panel shows ``gate_scale * f_N(N)``, i.e. 2 sigmoid(N) with the default gate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CODA_EXP_ROOT", str(ROOT))

PANELS = (("E_act", "f_E(E)  (tanh(E))"), ("N_act", "gate: gate_scale · f_N(N)"), ("M", "M = f_E(E) · gate"))


def collect(net, loader, batches: int) -> dict:
    import torch

    values: dict[str, list] = {k: [] for k, _ in PANELS}
    with torch.no_grad():
        for i, batch in enumerate(loader):
            if i >= batches:
                break
            mats = net.attention_matrices(batch["a_ids"], batch["a_mask"], batch["b_ids"], batch["b_mask"])
            valid = mats["pair_mask"]
            for k, collected in values.items():
                collected.append(mats[k][valid].flatten())
    return {k: torch.cat(v).numpy() for k, v in values.items()}


def plot(values: dict, out: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (key, label) in zip(axes, PANELS):
        ax.hist(values[key], bins=60, color="#3b6ea8")
        ax.set_title(label)
        ax.set_xlabel("value")
        ax.set_ylabel("pairs")
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt", type=Path, help="a Lightning checkpoint of a CoDA model")
    src.add_argument("--record", type=Path, help="a run record; its best checkpoint is used")
    ap.add_argument("--config", type=Path, help="the run's config_resolved.yaml (default: beside the checkpoint)")
    ap.add_argument("--batches", type=int, default=20, help="validation batches to collect (default 20)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "figures" / "figure_2.png")
    args = ap.parse_args(argv)

    from coda_exp.pipeline import load_trained

    ckpt = args.ckpt
    if args.record:
        rec = json.loads(args.record.read_text())
        ckpt = rec.get("best_checkpoint")
        if not ckpt:
            ap.error(f"{args.record}: the record has no best_checkpoint")
    cfg, dm, net = load_trained(ckpt, args.config)
    if not hasattr(net, "attention_matrices"):
        ap.error(f"model {cfg.model.name!r} has no attend step to plot")
    values = collect(net, dm.val_dataloader(), args.batches)
    if "M" not in values or not len(values["M"]):
        ap.error("no attention values collected")
    out = plot(values, args.out, f"{cfg.model.name} on {cfg.task.name} (validation pairs: {len(values['M'])})")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
