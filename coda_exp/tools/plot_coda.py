"""``coda-exp plot-coda``: Figure 2 of the CoDA paper, histograms of f_E(E), f_N(N) and M of a trained model
(tanh(E), sigmoid(N), M by default), to PNG (``python scripts/plot_coda.py`` in a checkout; needs
``coda-exp[plots]``).

    coda-exp plot-coda --ckpt outputs/runs/wikiqa-decompatt_coda/<time>-s1/checkpoints/last.ckpt
    coda-exp plot-coda --record results/runs/<run-id>.json        # its best checkpoint
    coda-exp plot-coda --record results/runs/<mlu-coda_transformer-run>.json --layers enc.0,dec.1.cross

The run is rebuilt from the ``config_resolved.yaml`` of its output folder; the matrices are collected over the
real (non-padding) token pairs of up to ``--batches`` validation batches. DecompAtt + CoDA: its one cross-attention.
CoDA Transformer (seq2seq or classifier): every head of the ``--layers`` attention layers (default all, pooled;
names ``enc.<i>``, ``dec.<i>.self``, ``dec.<i>.cross``), run with teacher forcing; a forward hook on each chosen
``CoDAScoring`` reruns it on the very q, k, v and masks it received with ``return_maps=True`` (the model's outputs
are untouched) and only valid query-key pairs enter: not padded keys or queries, not the future of a causal decoder.
Both read the ``AttentionMaps`` every attention returns (fields f_E, f_N, gate, weights = M).
The paper's observations (d = 200): sigmoid(N) saturates at {0, 1}; tanh(E) concentrates around 0 with both
signs; M follows tanh(E) with more mass near 0. The middle panel is f_N(N) itself, unscaled (the gate is
``gate_scale * f_N(N)``); panel titles name the model's own e_fn, n_fn, centring (E', N') and gate_scale.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
from contextlib import contextmanager
from pathlib import Path

from coda_exp import extras
from coda_exp.figures import default_figure, format_number, round_numbers

KEYS = ("f_E", "f_N", "weights")  # AttentionMaps fields, one panel each: f_E(E), f_N(N), M
CAPTURED = ("f_E", "f_N", "gate", "weights")  # what the Transformer hooks keep: f_E(E), f_N(N), the gate, M


def coda_options(net):
    """The ``CoDAOptions`` (e_fn, n_fn, gate, centring) of the first CoDA attention module inside ``net``."""
    from coda_exp.attention import CoDAOptions

    for module in net.modules():
        options = getattr(module, "options", None)
        if isinstance(options, CoDAOptions):
            return options
    raise ValueError(f"{type(net).__name__} contains no CoDA attention module")


def panels(options) -> list[tuple[str, str]]:
    """(maps field, panel title) for f_E(E), f_N(N) and M, named after the model's ``CoDAOptions``."""
    e_arg = "E′" if options.center_e else "E"
    n_arg = "N′" if options.center_n else "N"
    f_e, f_n = f"{options.e_fn}({e_arg})", f"{options.n_fn}({n_arg})"
    scale = options.gate
    gate = f_n if scale == 1.0 else f"{format_number(scale)}·{f_n}"
    return list(zip(KEYS, (f"f_E(E) = {f_e}", f"f_N(N) = {f_n}", f"M = {f_e} · {gate}")))


def collect(net, loader, batches: int) -> dict:
    import torch

    values: dict[str, list] = {k: [] for k in KEYS}
    with torch.no_grad():
        for i, batch in enumerate(loader):
            if i >= batches:
                break
            maps = net.attention_maps(batch["a_ids"], batch["a_mask"], batch["b_ids"], batch["b_mask"])
            for k, collected in values.items():
                collected.append(maps.values(k))
    return {k: torch.cat(v).numpy() for k, v in values.items()}


def figure(values: dict, title: str, options):
    """A matplotlib figure with one histogram per panel of ``panels(options)``."""
    extras.require("matplotlib", "coda-exp plot-coda")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), layout="constrained")
    for ax, (key, label) in zip(axes, panels(options)):
        ax.hist(values[key], bins=60, color="#3b6ea8")
        ax.set_title(label)
        ax.set_xlabel(f"value of {label.split(' = ', 1)[1]}")
        ax.set_ylabel("query-key pairs")
    fig.suptitle(round_numbers(title))
    return fig


def plot(values: dict, out: Path, title: str, options) -> Path:
    import matplotlib.pyplot as plt

    fig = figure(values, title, options)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def layer_name(qualified: str) -> str:
    """``encoder.layers.0.self_attn`` -> ``enc.0``; ``decoder_layers.1.cross_attn`` -> ``dec.1.cross`` (else as is)."""
    parts = qualified.split(".")
    if len(parts) == 4 and parts[:2] == ["encoder", "layers"] and parts[3] == "self_attn":
        return f"enc.{parts[2]}"
    if len(parts) == 3 and parts[0] == "decoder_layers" and parts[2] in ("self_attn", "cross_attn"):
        return f"dec.{parts[1]}.{parts[2].removesuffix('_attn')}"
    return qualified


def coda_layers(net) -> dict:
    """{layer name: CoDAScoring} of every multi-head attention of ``net`` that scores with CoDA, in model order."""
    from coda_exp.attention.multihead import CoDAScoring, MultiHeadAttention

    return {layer_name(name): module.scoring for name, module in net.named_modules()
            if isinstance(module, MultiHeadAttention) and isinstance(module.scoring, CoDAScoring)}


def select_layers(available: list[str], spec: str) -> list[str]:
    """``all`` or a comma list of names from ``available``; ValueError listing the available names otherwise."""
    if spec.strip() == "all":
        return list(available)
    names = list(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))
    unknown = [n for n in names if n not in available]
    if not names or unknown:
        raise ValueError(f"--layers {spec!r}: unknown layer(s) {', '.join(unknown) or '(none given)'}; "
                         f"available: all, {', '.join(available)}")
    return names


def _record(name: str, store: dict, scoring, args, kwargs, output) -> None:
    """Forward hook: rerun the call with ``return_maps=True`` (``forward`` itself: no hook recursion), check it
    reproduces the layer's own output, keep the valid pairs of the maps."""
    call = inspect.signature(scoring.forward).bind(*args, **kwargs).arguments
    call.pop("return_maps", None)
    out, maps = scoring.forward(**call, return_maps=True)
    if not call.get("dropout_p"):  # in eval: the materialising path gives the layer's output
        diff = (out - output[0]).abs().max().item() if output[0].numel() else 0.0
        if diff > 1e-4 * max(1.0, output[0].abs().max().item()):
            raise RuntimeError(f"layer {name}: the CoDA maps do not reproduce the layer's output (max difference "
                               f"{diff:.3g}); CoDAScoring's kernels disagree")
    for key in CAPTURED:
        store[key].append(maps.values(key).detach().flatten().cpu())


@contextmanager
def capture(layers: dict):
    """Within the block, every forward of the ``layers`` ({name: CoDAScoring}) appends its valid pairs' f_E,
    f_N, gate and weights (M) to ``values[name][key]`` (yielded); the hooks are removed on exit, outputs never change."""
    values = {name: {key: [] for key in CAPTURED} for name in layers}
    handles = [scoring.register_forward_hook(functools.partial(_record, name, values[name]), with_kwargs=True)
               for name, scoring in layers.items()]
    try:
        yield values
    finally:
        for handle in handles:
            handle.remove()


def run_batch(net, batch: dict):
    """One teacher-forced forward of a Transformer on a batch of its task (seq2seq or text classification)."""
    if "src_ids" in batch:
        return net(batch["src_ids"], batch["src_mask"], batch["tgt_in"], batch["tgt_mask"])
    if "ids" in batch:
        return net(batch["ids"], batch.get("mask"))
    raise ValueError(f"cannot feed a batch with keys {sorted(batch)} to {type(net).__name__}")


def collect_layers(net, loader, batches: int, names: list[str]) -> dict:
    """{f_E, f_N, gate, weights}: 1-D arrays pooled over the valid pairs of every head of the ``names`` layers."""
    import torch

    layers = coda_layers(net)
    with torch.no_grad(), capture({n: layers[n] for n in names}) as values:
        for i, batch in enumerate(loader):
            if i >= batches:
                break
            run_batch(net, batch)
    return {key: torch.cat([t for n in names for t in values[n][key]] or [torch.zeros(0)]).numpy()
            for key in CAPTURED}


def _read_record(ap: argparse.ArgumentParser, path: Path) -> dict:
    """``--record``'s run record as a dict; a parser error naming the file when it is none (not JSON, a list)."""
    if not path.is_file():
        ap.error(f"no run record at {path}" + (" (a folder; expected a record, results/runs/<run>.json)"
                                                if path.is_dir() else ""))
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        ap.error(f"--record {path}: cannot read it as a run record (JSON): {err}")
    if not isinstance(record, dict):
        ap.error(f"--record {path}: not a run record (a JSON {type(record).__name__}, expected an object)")
    return record


def _checkpoint(ap: argparse.ArgumentParser, args) -> Path:
    """The checkpoint to load (``--ckpt`` or the record's best_checkpoint); a parser error naming what is missing."""
    if args.record:
        ckpt = _read_record(ap, args.record).get("best_checkpoint")
        if not ckpt:
            ap.error(f"{args.record}: the record has no best_checkpoint")
        if not Path(ckpt).is_file():
            ap.error(f"{args.record}: its best_checkpoint {ckpt} no longer exists (checkpoints are not committed; "
                     f"re-run the experiment or pass --ckpt)")
        return Path(ckpt)
    if not args.ckpt.is_file():
        ap.error(f"checkpoint {args.ckpt} does not exist")
    return args.ckpt


def _transformer_values(ap, args, cfg, dm, net):
    """(values, options, title) of a CoDA Transformer's ``--layers``; parser errors for what cannot be plotted."""
    layers = coda_layers(net)
    if not layers:
        ap.error(f"model {cfg.model.name!r} has no CoDA attention layer to plot")
    try:
        names = select_layers(list(layers), args.layers)
    except ValueError as err:
        ap.error(str(err))
    options = layers[names[0]].options
    if any(layers[n].options != options for n in names):
        ap.error(f"layers {', '.join(names)} have different CoDA options; pick layers that share them (--layers)")
    values = collect_layers(net, dm.val_dataloader(), args.batches, names)
    label = f"all {len(names)} CoDA layers" if names == list(layers) else "layers " + ", ".join(names)
    return values, options, f"{cfg.model.name} on {cfg.task.name}, {label} (valid pairs × heads: {len(values['weights'])})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt", type=Path, help="a Lightning checkpoint of a CoDA model")
    src.add_argument("--record", type=Path, help="a run record; its best checkpoint is used")
    ap.add_argument("--config", type=Path, help="the run's config_resolved.yaml (default: beside the checkpoint)")
    ap.add_argument("--batches", type=int, default=20, help="validation batches to collect (default 20)")
    ap.add_argument("--layers", default="all", help="CoDA Transformer: 'all' (default, pooled) or a comma list of "
                    "layer names such as enc.0,dec.1.self,dec.1.cross")
    ap.add_argument("--out", type=Path, default=None,
                    help="the PNG to write (default: figures/figure_2.png of the run's results folder: beside the "
                         "record's runs/, else the run's paths.results_dir; results/figures for a paper-scale run, "
                         "outputs/fixture_results/figures for a fixture run)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="every library's log lines and progress bars on the console (quiet by default, as training)")
    args = ap.parse_args(argv)
    if args.batches < 1:  # a torch.cat of nothing otherwise, after the model loads
        ap.error(f"--batches {args.batches}: expected at least 1 validation batch")
    if args.config is not None and not args.config.is_file():
        ap.error(f"--config {args.config}: " + ("a folder" if args.config.is_dir() else "no such file")
                 + "; expected the run's config_resolved.yaml (without --config: the config the checkpoint carries)")
    extras.require("matplotlib", "coda-exp plot-coda")  # before the model loads

    from coda_exp import console
    from coda_exp.offline import load_trained

    console.configure(verbose=args.verbose)  # as a run: no datasets "tokenising" bars while the data is read

    cfg, dm, net = load_trained(_checkpoint(ap, args), args.config)
    if hasattr(net, "attention_maps"):  # DecompAtt: its one cross-attention
        if args.layers != "all":
            ap.error(f"--layers applies to CoDA Transformer models; {cfg.model.name!r} has one attend step")
        try:
            options = coda_options(net)
        except ValueError as err:
            ap.error(f"model {cfg.model.name!r}: {err}")
        values = collect(net, dm.val_dataloader(), args.batches)
        title = f"{cfg.model.name} on {cfg.task.name} (validation pairs: {len(values['weights'])})"
    else:
        values, options, title = _transformer_values(ap, args, cfg, dm, net)
    if "weights" not in values or not len(values["weights"]):
        ap.error("no attention values collected")
    if args.out is None:
        record = _read_record(ap, args.record) if args.record else {}
        args.out = default_figure("figure_2.png", args.record.parent if args.record else None,
                                  [record.get("scale", cfg.get("scale_name"))], Path(cfg.paths.results_dir))
    print(plot(values, args.out, title, options))
    return 0
