"""``coda-exp --help`` (and ``python train.py --help``): how to run, the config groups a user chooses with their
options (read from the configs, so the list is never stale), the commands and five examples. It replaces Hydra's
stock help, which lists internal groups (``tables``, ``task_scale``) and dumps the default config;
``--hydra-help`` still shows Hydra's own flags."""

from __future__ import annotations

import textwrap
from pathlib import Path

from coda_exp.commands import COMMANDS
from coda_exp.environment import config_dir

#: the groups a user chooses (``group=option``), in the order a run is described, with what the choice sets
USER_GROUPS = {
    "task": "the benchmark: its data, metric, budget and the paper's hyper-parameters",
    "model": "the network",
    "model/attention": "a pairwise model's attention (DecompAtt, AttConv, DecaProp): softmax or CoDA",
    "model/scoring": "a Transformer's attention scoring: softmax or CoDA",
    "scale": "how much data and compute, recorded in every run (fixture: a smoke run in seconds)",
    "preset": "a Transformer size + optimiser + schedule bundle (T2T's hparams sets)",
    "optimizer": "the optimiser (a task or preset picks its paper's)",
    "trainer": "where it runs: CPU, one GPU, the fast GPU path, several GPUs (DDP)",
    "logger": "where metrics go besides the run record",
    "callbacks": "Lightning callbacks (gate_stats: CoDA's gate during training)",
    "experiment": "a paper table's sweep (with -m): its grid of tasks, models and seeds",
    "debug": "quick checks: fast_dev_run, a few batches, overfitting one batch",
}
#: groups the configs compose by themselves: not chosen on the command line
INTERNAL_GROUPS = {
    "data": "a family's data base, chosen by the task",
    "task_scale": "what a scale means for one task, chosen by task and scale",
    "tables": "table specs, read by coda-exp tables",
    "paths": "where things go (paths.root_dir=..., paths.data_dir=...)",
    "hydra": "Hydra's own settings and launchers",
    "local": "this machine's settings (configs/local/default.yaml, git-ignored)",
}

EXAMPLES = (
    ("coda-exp task=wikiqa model=decompatt scale=fixture", "a smoke run in seconds, from any folder"),
    ("coda-exp task=snli model=decompatt_coda trainer=gpu seed=2", "DecompAtt + CoDA on SNLI, on one GPU"),
    ("coda-exp task=mlu model=coda_transformer scale=cpu logger=tensorboard -v", "CPU scale, every library's logs"),
    ("coda-exp -m experiment=table_2 scale=cpu seed=1,2,3 resume=auto",
     "a paper table's sweep: every task x model x seed (again: only what is left)"),
    ("coda-exp tables --tables table_2 --print", "then its table, the paper's numbers beside ours"),
)


def options(group: str, configs: Path | None = None) -> list[str]:
    """The options of ``group`` (its YAML files), sorted."""
    return sorted(p.stem for p in ((configs or config_dir()) / group).glob("*.yaml"))


def _listed(names: list[str], indent: int, width: int = 100) -> str:
    return textwrap.fill(", ".join(names), width=width, initial_indent=" " * indent, subsequent_indent=" " * indent)


def help_text(configs: Path | None = None) -> str:
    configs = configs or config_dir()
    lines = [
        "coda-exp: train, validate and test one task x model (CoDA, Tay et al. 2019; AttConv, Yin & Schütze 2018),",
        "then make the paper's tables and figures from the run records.",
        "",
        "Usage:",
        "  coda-exp [group=option ...] [key=value ...]      one run (python train.py and python -m coda_exp: the same)",
        "  coda-exp -m [group=a,b ...] [key=v1,v2 ...]      a sweep: one run per combination",
        "  coda-exp <command> [--help]                      tables, plots, data preparation (below)",
        "",
        "  -v, --verbose     every library's logs, warnings, progress bars and errors' tracebacks (verbose=true)",
        "  --cfg job         print the composed config and exit (add --resolve to resolve it)",
        "  --hydra-help      Hydra's own flags (--multirun, --config-dir, --info, ...)",
        "",
        "Config groups (group=option; the defaults: configs/train.yaml):",
    ]
    for group, what in USER_GROUPS.items():
        lines.append(f"  {group:<16} {what}")
        lines.append(_listed(options(group, configs), indent=19))
    lines += ["", "Any key of the composed config: key=value (task.epochs=3, data.batch_size=32, optimizer.lr=1e-3),",
              "+key=value to add one, ~key to delete one.", "", "Commands (coda-exp <command> --help for each):"]
    lines += [f"  {name:<20} {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", "Examples:"]
    for command, what in EXAMPLES:
        lines += [f"  {command}", f"      {what}"]
    lines += ["", "Runs go to outputs/runs/<task>-<model>/<time>-s<seed>[-<tag of the overrides>]/ (config,",
              "train.log, checkpoints); each finished run's record to results/runs/ (scale=fixture:",
              "outputs/fixture_results/); both under the folder you run from (inside a checkout: the checkout;",
              "CODA_EXP_ROOT=DIR chooses). Code of your own: imports=[my.module]. docs/running.md"]
    return "\n".join(lines) + "\n"
