#!/usr/bin/env python
"""Figure 2 of the CoDA paper: histograms of f_E(E), f_N(N) and M of a trained model (tanh(E), sigmoid(N), M by
default), to PNG.

    python scripts/plot_coda.py --ckpt outputs/runs/wikiqa-decompatt_coda/<time>-s1/checkpoints/last.ckpt
    python scripts/plot_coda.py --record results/runs/<run-id>.json        # its best checkpoint

The run is rebuilt from the ``config_resolved.yaml`` of its output folder; the matrices are collected over the
real (non-padding) token pairs of up to ``--batches`` validation batches. The paper's observations (d = 200):
sigmoid(N) saturates at {0, 1}; tanh(E) concentrates around 0 with both signs; M follows tanh(E) with more mass
near 0. The middle panel is f_N(N) itself, unscaled (the gate is ``gate_scale * f_N(N)``); panel titles name the
model's own e_fn, n_fn, centring (E', N') and gate_scale.
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

KEYS = ("E_act", "f_N", "M")  # keys of the attention's matrices, one panel each


def coda_options(net) -> dict:
    """The CoDA options (e_fn, n_fn, gate_scale, centring) of the first CoDA attention module inside ``net``."""
    for module in net.modules():
        options = getattr(module, "options", None)
        if isinstance(options, dict) and "e_fn" in options and "n_fn" in options:
            return options
    raise ValueError(f"{type(net).__name__} contains no CoDA attention module")


def panels(options: dict) -> list[tuple[str, str]]:
    """(matrix key, panel title) for f_E(E), f_N(N) and M, named after the model's functions and options."""
    e_arg = "E′" if options.get("center_e") else "E"
    n_arg = "N′" if options.get("center_n") else "N"
    f_e, f_n = f"{options['e_fn']}({e_arg})", f"{options['n_fn']}({n_arg})"
    scale = float(options.get("gate_scale", 1.0))
    gate = f_n if scale == 1.0 else f"{scale:g}·{f_n}"
    return list(zip(KEYS, (f"f_E(E) = {f_e}", f"f_N(N) = {f_n}", f"M = {f_e} · {gate}")))


def collect(net, loader, batches: int) -> dict:
    import torch

    values: dict[str, list] = {k: [] for k in KEYS}
    with torch.no_grad():
        for i, batch in enumerate(loader):
            if i >= batches:
                break
            mats = net.attention_matrices(batch["a_ids"], batch["a_mask"], batch["b_ids"], batch["b_mask"])
            valid = mats["pair_mask"]
            for k, collected in values.items():
                collected.append(mats[k][valid].flatten())
    return {k: torch.cat(v).numpy() for k, v in values.items()}


def figure(values: dict, title: str, options: dict):
    """A matplotlib figure with one histogram per panel of ``panels(options)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (key, label) in zip(axes, panels(options)):
        ax.hist(values[key], bins=60, color="#3b6ea8")
        ax.set_title(label)
        ax.set_xlabel("value")
        ax.set_ylabel("pairs")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot(values: dict, out: Path, title: str, options: dict) -> Path:
    import matplotlib.pyplot as plt

    fig = figure(values, title, options)
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
    try:
        options = coda_options(net)
    except ValueError as err:
        ap.error(f"model {cfg.model.name!r}: {err}")
    values = collect(net, dm.val_dataloader(), args.batches)
    if "M" not in values or not len(values["M"]):
        ap.error("no attention values collected")
    out = plot(values, args.out, f"{cfg.model.name} on {cfg.task.name} (validation pairs: {len(values['M'])})",
               options)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
