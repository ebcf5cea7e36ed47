"""Whether the chosen model can run the task: its config's ``families`` against the task's ``family`` (a seq2seq
Transformer on SNLI cannot), with the models that can. Reads configs only (no Lightning, no torch): the entry point
asks before Hydra sets up logging, a sweep for each of its jobs before the first starts."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def model_families() -> dict[str, list[str]]:
    """Each option of the model group with the task families it serves (``families``, its own or the model's it
    extends: the first plain entry of its defaults list), read from the YAML files alone."""
    import yaml

    from coda_exp.environment import config_dir

    files = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) or {}
             for p in sorted((config_dir() / "model").glob("*.yaml"))}

    def families(name: str, seen: tuple = ()) -> list[str]:
        own = files.get(name) or {}
        if "families" in own or name in seen:
            return list(own.get("families") or [])
        base = next((d for d in own.get("defaults") or [] if isinstance(d, str) and d in files), None)
        return families(base, (*seen, name)) if base else []

    return {name: families(name) for name in files}


def _model_named(cfg: DictConfig) -> bool | None:
    """Whether the user chose the model (``model=``, or an experiment, which may), from the run's overrides: the
    composed config's Hydra section, else Hydra's config of the running job; None where neither is there."""
    overrides = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else None
    if overrides is None:
        return None
    return any(str(o).lstrip("~+").split("=", 1)[0] in ("model", "experiment") for o in overrides)


def family_problem(cfg: DictConfig, named: bool | None = None) -> str | None:
    """Why the model cannot run the task (a seq2seq Transformer on SNLI: ``model.families`` lacks the task's
    ``family``), or None, with the models that fit the task and, where the user chose no model, that the model is
    the default (``named``: whether the user chose the model; None: from the run's overrides); imports nothing of
    Lightning, so the entry point can ask before Hydra sets up logging."""
    families = cfg.model.get("families")
    if families is None or cfg.task.family in families:
        return None
    named = _model_named(cfg) if named is None else named
    default = " (the default model: no model= was given)" if named is False else ""
    served = model_families()
    fitting = [name for name, families_of in served.items() if cfg.task.family in families_of]
    known = sorted({f for families_of in served.values() for f in families_of})
    choose = (f"; the models that fit it: {', '.join(f'model={m}' for m in fitting)}" if fitting else
              f"; no model serves task.family={cfg.task.family} (set in configs/task/{cfg.task.name}.yaml): the "
              f"families the models serve (their `families` in configs/model/) are {', '.join(known)}")
    return (f"model={cfg.model.name}{default} does not fit task={cfg.task.name}: the task is {cfg.task.family}, the "
            f"model serves {list(families)}{choose}")


def misfit(cfg: DictConfig, named: bool | None = None) -> str | None:
    """:func:`family_problem`, unless the task's own modules serve another family than its ``task.family`` says: then
    the task's YAML is what is wrong (a new task's ``family`` miscopied), and that is the message
    (``coda_exp.node_keys.family_problem``), not a list of models that fit a family the task is not. Imports the
    task's modules (and so Lightning) only when the model does not fit, where the caller stops anyway."""
    problem = family_problem(cfg, named)
    if problem is None:
        return None
    from coda_exp.node_keys import family_problem as serves_another

    for key in ("task.module", "data"):
        target = OmegaConf.select(cfg, f"{key}._target_", default=None)
        try:
            own = serves_another(cfg, key, str(target)) if target else None
        except Exception:  # noqa: BLE001 - a target that cannot be located: the run's node checks name it
            own = None
        if own:
            return own
    return problem
