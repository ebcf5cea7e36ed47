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


def experiment_axes(cfg: DictConfig, named: set[str]) -> dict[str, list[str]]:
    """The keys the composed ``cfg``'s experiment sweeps (``hydra.sweeper.params``) that the command line does not
    name (``named``: there the command line wins, as in Hydra's basic sweeper), each with its values as typed: the
    grid ``-m experiment=table_6`` runs, whose jobs the entry point checks before the first starts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = cfg.hydra.sweeper.get("params") or {}
    mine = [f"{k}={v}" for k, v in params.items() if k not in named]
    return {o.get_key_element(): ([str(v) for v in o.sweep_string_iterator()] if o.is_sweep_override()
                                  else [o.get_value_element_as_str()])
            for o in OverridesParser.create().parse_overrides(mine)}


def job_problems(cfg: DictConfig) -> list[str]:
    """What would fail in a sweep's job of the composed ``cfg`` (with its Hydra section) before it loads any data:
    your modules not found (``imports``), the model that does not fit the task (:func:`coda_exp.model_fit.misfit`)
    and the value checks (:func:`coda_exp.config_checks.config_problems`, less those that import Lightning or the
    models: the entry point asks before Hydra sets up logging). Composed configs only: a few milliseconds a job."""
    from omegaconf import open_dict

    from coda_exp import plugins
    from coda_exp.config_checks import config_problems
    from coda_exp.model_fit import misfit

    job = cfg.copy()
    with open_dict(job):
        job.pop("hydra", None)
    fit = plugins.problem(cfg.get("imports")) or misfit(cfg)  # your modules (imports) found, not imported
    return ([fit] if fit else []) + list(config_problems(job, imports=False).values())


def unfit_pairs(composed: list[DictConfig], tasks: list[str], models: list[str]) -> list[tuple[str, str, str]]:
    """(task option, model option, why) for each pair of a sweep's swept ``tasks`` and ``models`` (options as typed)
    that none of the ``composed`` jobs has and whose model does not fit the task: a grid's jobs are not all composed
    (:func:`coda_exp.composition.sweep_variants`), but each task's family and each model's families are known from those."""
    from coda_exp.model_fit import family_problem

    seen, task_of, model_of = set(), {}, {}
    for cfg in composed:
        choices = cfg.hydra.runtime.choices
        seen.add((choices.get("task"), choices.get("model")))
        task_of[choices.get("task")] = {"name": cfg.task.name, "family": cfg.task.family}
        model_of[choices.get("model")] = {"name": cfg.model.name, "families": cfg.model.get("families")}
    found = []
    for task in tasks:
        for model in models:
            if (task, model) in seen or task not in task_of or model not in model_of:
                continue
            why = family_problem(OmegaConf.create({"task": task_of[task], "model": model_of[model]}), named=True)
            if why:
                found.append((task, model, why))
    return found


def repeated_values(swept: dict[str, list[str]]) -> str | None:
    """The message refusing a sweep one of whose ``swept`` keys (key -> its values as typed) repeats a value
    (``seed=1,1``: the same configuration trained twice, the later record superseding the earlier), else None."""
    repeats = [(key, value) for key, values in swept.items() for value in dict.fromkeys(values)
               if values.count(value) > 1]
    if not repeats:
        return None
    listed = "; ".join(f"{key}={','.join(swept[key])} repeats {value}" for key, value in repeats)
    return (f"the sweep repeats a value: {listed}; its jobs would train the same configuration more than once, and "
            "each record would supersede the one before: give each value once")


def sweep_refusal(jobs: list[tuple[str, list[str]]], runs: int) -> str | None:
    """The message refusing a sweep of ``runs`` jobs some of whose ``jobs`` ((the job's swept overrides, its
    problems), one per job checked, the first job first) would fail, or None: a problem every checked job has is
    said once, the others under the job's overrides."""
    if not any(problems for _, problems in jobs):
        return None
    every = [p for p in jobs[0][1] if len(jobs) > 1 and all(p in problems for _, problems in jobs)]
    lines = [f"every job: {p}" for p in every]
    lines += [f"job {label or '(the first)'}: {p}" for label, problems in jobs for p in problems if p not in every]
    return (f"the sweep of {runs} job{'s' * (runs > 1)} would fail in these jobs before any data loads; no job has "
            f"run (fix the swept values or the overrides):\n  " + "\n  ".join(lines))
