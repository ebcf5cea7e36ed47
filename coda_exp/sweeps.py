"""An experiment that is a sweep (``hydra.sweeper.params``: ``experiment=table_3``), chosen without ``-m``: which of
its runs the user meant, or why the run would be none of them. The entry point (``coda_exp.cli``: "add -m, or name
one of its runs") and ``coda-exp estimate`` (which times one run) ask the same question here; it reads a composed
config only."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def sweep_problem(cfg: DictConfig, parsed: list) -> tuple[str, int, list[str], list[str]] | None:
    """(the experiment, its number of runs, the overrides naming its first run, the keys the user did not name at a
    value none of its runs has) where a run without ``-m`` of a config whose experiment is a sweep
    (``hydra.sweeper.params``, which only a sweep applies) is a mistake, else None. It is one when the user named
    none of the sweep's keys (``experiment=table_6`` alone: one of its runs, silently), or when a key the user did
    not name is at a value none of the sweep's jobs has (``model=decompatt`` under Table 6's ``model:
    transformer,coda_transformer``: a run of no job). A run that names its job (``experiment=table_6
    model=transformer seed=2``, or ``model=transformer`` alone: seed 1, the grid's first) is one job of the sweep:
    not a mistake. ``cfg``: composed with its Hydra config, inside Hydra's initialisation; ``parsed``: the user's
    overrides, parsed."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = cfg.hydra.sweeper.get("params") or {}
    if not params or "MULTIRUN" in str(cfg.hydra.get("mode")):
        return None
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    sweep = parser.parse_overrides([f"{k}={v}" for k, v in params.items()])
    named = {o.key_or_group for o in parsed}
    choices, runs, off, first = cfg.hydra.runtime.choices, 1, [], []
    for o in sweep:
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        runs *= len(values)
        first.append(f"{o.key_or_group}={values[0]}")
        if o.key_or_group in named:
            continue
        now = choices[o.key_or_group] if o.key_or_group in choices else OmegaConf.select(cfg, o.key_or_group)
        if not any(now == v or str(now) == str(v) for v in values):
            off.append(f"{o.key_or_group}={now}")
    if not off and (runs == 1 or named & {o.key_or_group for o in sweep}):
        return None
    return choices.get("experiment") or "this experiment", runs, first, off
