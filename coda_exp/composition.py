"""What the entry point checks of a training command line before Hydra starts (:func:`check_composition`): Hydra's
composition of the run's config (or of each job of a sweep) with every mistake a user can make in it as one message
and exit status 2, before any folder is made or any job runs; the run folder Hydra will make
(:func:`check_job_folder`). Split out of :mod:`coda_exp.cli`, which re-exports these. It imports no Lightning
(it runs before Hydra sets up the run's logging) unless it has found a mistake and stops."""

from __future__ import annotations

import math
import re
import shlex
import sys

from omegaconf import DictConfig

from coda_exp.environment import config_dir

MAX_COMPOSED = 64  # a sweep's compositions checked before it starts (one per swept value, ~0.1 s each)


def sweep_variants(rows: list[list[str]]) -> list[list[str]]:
    """The override lists to compose for a sweep whose keys take ``rows`` (each key's overrides, one per value): its
    first job, then each value of each key with the other keys at their first; each once, at most
    :data:`MAX_COMPOSED` (every composition is one of the sweep's jobs, every swept value is in one)."""
    first = [row[0] for row in rows]
    varied = [[value if k == j else first[k] for k in range(len(rows))] for j, row in enumerate(rows) for value in row]
    return [list(v) for v in dict.fromkeys(tuple(v) for v in [first, *varied])][:MAX_COMPOSED]


def check_composition(argv: list[str]) -> list[DictConfig] | None:
    """Hydra's composition of the run's config, before Hydra starts: an unknown group option (``task=snlii``), a key
    the config lacks (``task.max_stepz=5``) or an override Hydra cannot parse is one message and exit status 2 (a
    user's mistake, ``coda_exp.errors``), not Hydra's report and status 1, and a sweep stops before its first job,
    not at the job that meets it. A sweep composes each swept value with the other overrides' first values (every
    composition checked is one of its jobs); runs with Hydra's own config flags (``--config-name``...) are left to
    Hydra. An experiment that is a sweep (``hydra.sweeper.params``) chosen without ``-m`` is refused unless the run
    is one of its jobs that the user picked (:func:`_sweep_without_multirun`). Returns a sweep's jobs composed."""
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from coda_exp.config_checks import REQUIRED, composition_error, yaml_error
    from coda_exp.config_keys import appended_key_problems, group_option_hint, local_key_problems
    from coda_exp.errors import USER_ERROR_EXIT
    from coda_exp.sweeps import experiment_axes, job_problems, repeated_values, sweep_refusal, unfit_pairs

    args, _ = get_args_parser().parse_known_args(argv)
    if not (args.help or args.hydra_help) and (several := _one_command_only(args)):
        print(f"error: {several}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT)
    if (args.help or args.hydra_help or args.shell_completion or args.info or args.config_path or args.config_name
            or args.config_dir or args.experimental_rerun or GlobalHydra.instance().is_initialized()):
        return
    composed = list(args.overrides)  # the overrides of the composition that failed (one value each in a sweep)
    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
        variants, axes, first = [args.overrides], {}, None  # (first: the sweep's first job composed, for its grid)
        if args.multirun:
            if any(o.value_type == ValueType.GLOB_CHOICE_SWEEP for o in parsed):
                return  # glob(...) needs Hydra's loader to expand: Hydra's own report
            rows = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                    else [o.input_line] for o in parsed]
            composed = [row[0] for row in rows]
            with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):  # the experiment's grid
                first = compose("train", overrides=composed, return_hydra_config=True)
            axes = experiment_axes(first, {o.key_or_group for o in parsed})
            variants = sweep_variants(rows + [[f"{k}={v}" for v in values] for k, values in axes.items()])
        removed = next((o.key_or_group for o in parsed if o.is_delete() and o.key_or_group in REQUIRED), None)
        if removed is not None:
            print(f"error: ~{removed} removes {removed}, which every run reads: give it another value instead "
                  f"({removed}=...)", file=sys.stderr, flush=True)
            raise SystemExit(USER_ERROR_EXIT)
        null_group = next((o for o in parsed if not o.is_delete() and (config_dir() / o.key_or_group).is_dir()
                           and "null" in ([str(v) for v in o.sweep_string_iterator()] if o.is_sweep_override()
                                          else [o.get_value_element_as_str()])), None)
        if null_group is not None:  # Hydra's ValueError("Config group override must be a string"), a traceback
            print(f"error: {_null_group(null_group.key_or_group, args.overrides)}", file=sys.stderr, flush=True)
            raise SystemExit(USER_ERROR_EXIT)
        appended = [(o.key_or_group, o.input_line) for o in parsed if o.is_add() and not o.is_force_add()]
        swept = {o.get_key_element(): [str(v) for v in o.sweep_string_iterator()] for o in parsed
                 if args.multirun and o.is_sweep_override()} | {k: v for k, v in axes.items() if len(v) > 1}
        jobs, job_configs = [], []  # a sweep's jobs composed: (its swept overrides, its problems), their configs
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            for number, overrides in enumerate(variants):
                again = first is not None and number == 0 and list(overrides) == composed  # no grid of its own
                composed = list(overrides)
                cfg = first if again else compose("train", overrides=list(overrides), return_hydra_config=True)
                problems = appended_key_problems(cfg, appended) if number == 0 and appended else []
                if number == 0:  # configs/local/default.yaml: a misspelt key there is refused as one typed here
                    problems += local_key_problems(cfg, list(overrides), lambda o: compose(
                        "train", overrides=o, return_hydra_config=True))
                if number == 0 and not (args.multirun or args.cfg):
                    problems += [p for p in [_sweep_without_multirun(cfg, parsed, args.overrides)] if p]
                if problems:
                    print("error: " + "\n  ".join(problems), file=sys.stderr, flush=True)
                    raise SystemExit(USER_ERROR_EXIT)
                if number == 0 and not args.cfg:  # --cfg job prints the config: no folder made
                    if not (args.multirun or "MULTIRUN" in str(cfg.hydra.get("mode"))):  # said before the folder
                        _check_compatible(cfg)
                    check_job_folder(cfg, args.multirun)
                if args.multirun and not args.cfg:
                    jobs.append((" ".join(o for o in overrides if o.split("=", 1)[0] in swept), job_problems(cfg)))
                    job_configs.append(cfg)
        if jobs:  # each job composed is checked as its run would check it, before the first job starts
            pairs = unfit_pairs(job_configs, swept["task"], swept["model"]) if {"task", "model"} <= set(swept) else []
            refusal = repeated_values(swept) or sweep_refusal([*jobs, *((f"task={t} model={m}", [why]) for t, m, why in pairs)],
                                    math.prod(len(values) for values in swept.values()))
            if refusal:
                print(f"error: {refusal}", file=sys.stderr, flush=True)
                raise SystemExit(USER_ERROR_EXIT)
        return job_configs  # their data: checked once Hydra has set up logging (hydra_callbacks.JobReport)
    except yaml.YAMLError as err:  # a config file PyYAML cannot read: its file, line and column, not a traceback
        print(f"error: {yaml_error(err)}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT) from None
    except (ConfigCompositionException, OverrideParseException) as err:
        message = str(composition_error(err))
        if isinstance(err, OverrideParseException):
            message = _unparsable(args.overrides) + message
        missing = re.match(r"Could not override '([^']+)'", message)
        group = _other_group(missing.group(1), composed) if missing and "/" in missing.group(1) else ""
        typed = next((o for o in args.overrides if missing and o.split("=", 1)[0] == missing.group(1)), "=")
        if group:  # model/attention on a Transformer: appending it (Hydra's advice) adds a key the model refuses
            message = message.partition("\n")[0] + group
        elif missing and "." not in missing.group(1) and (close := _top_level_like(missing.group(1), composed)):
            message = (f"{missing.group(1)} is no key nor config group of the config, spelled like {close}: did you "
                       f"mean {close}={typed.split('=', 1)[1]}?")  # (not Hydra's advice: +modle=... adds a key)
        elif missing:  # the key elsewhere in the config, before Hydra's advice to add it
            first, _, rest = message.partition("\n")
            other = group_option_hint(missing.group(1), _composed_without(missing.group(1), composed),
                                      typed.split("=", 1)[1])  # another option of a model's group: not "+key"
            hint = other or _elsewhere(missing.group(1), composed, typed_in=args.overrides)
            message = first + hint + (f"\n{rest}" if rest and not other else "")
        print(f"error: {message}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT) from None


def _unparsable(overrides: list[str]) -> str:
    """Which override Hydra's grammar refused (its own message names a token, not the key), as the start of the
    message: ``seed=1,: ``, with a word on a trailing comma (a sweep of one value, ``seed=1,2`` with ``-m``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException:
            comma = (" (a value ending in a comma starts a sweep: give one value, or several with -m)"
                     if override.rstrip().endswith(",") else "")
            return f"cannot read the override '{override}'{comma}: "
    return ""


def _one_command_only(args) -> str | None:
    """Hydra runs one of ``--run``, ``-m``, ``--cfg``, ``--info``, ``--shell-completion`` (more than one: its
    ValueError, a traceback): one message instead, and for ``-m --cfg job`` how to see the config."""
    given = [flag for flag, on in (("-m", args.multirun), ("--cfg", args.cfg is not None), ("--run", args.run),
                                   ("--info", args.info is not None), ("--shell-completion", args.shell_completion))
             if on]
    if len(given) < 2:
        return None
    if set(given) == {"-m", "--cfg"}:
        return (f"--cfg {args.cfg} prints one job's config and -m runs a sweep: Hydra takes one of them; drop -m "
                f"(and give a key swept on the command line one value, seed=1 for seed=1,2) to see a job's config, "
                f"or drop --cfg to run the sweep")
    return f"{' and '.join(given)} given together: Hydra takes only one of --run, -m, --cfg, --info, --shell-completion"


def _sweep_without_multirun(cfg: DictConfig, parsed: list, overrides: list[str]) -> str | None:
    """Why a run without ``-m`` of an experiment that is a sweep is a mistake (:func:`coda_exp.sweeps.sweep_problem`),
    with the command to run it as a sweep, or None."""
    from pathlib import Path

    from coda_exp.sweeps import sweep_problem

    found = sweep_problem(cfg, parsed)
    if found is None:
        return None
    experiment, runs, first, off = found
    program = {"train.py": "python train.py", "__main__.py": "python -m coda_exp"}.get(Path(sys.argv[0]).name,
                                                                                       "coda-exp")
    typed = " ".join(shlex.quote(o) for o in overrides)
    why = (f"; without -m this run would have the config's own {' '.join(off)}, which is none of the sweep's runs"
           if off else "")
    return (f"experiment={experiment} is a sweep of {runs} run{'s' * (runs > 1)}: add -m ({program} -m {typed}), "
            f"or name one of its runs ({' '.join(first)}){why}")


def _check_compatible(cfg: DictConfig) -> None:
    """A single run whose model cannot run its task (``model_fit.misfit``): one message and exit status
    2 before Hydra makes a run folder and starts its logging. Imports no Lightning: imported before Hydra sets up
    logging, Lightning would keep its lines out of the run's train.log. The run checks the model's keys itself."""
    from coda_exp import plugins
    from coda_exp.errors import USER_ERROR_EXIT
    from coda_exp.model_fit import misfit

    problem = plugins.problem(cfg.get("imports")) or misfit(cfg)  # your modules found, none imported yet
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT)


def check_job_folder(cfg: DictConfig, multirun: bool) -> None:
    """The folder Hydra makes for the run (``hydra.run.dir``) or the sweep (``hydra.sweep.dir``) can be made: one
    message naming it and exit status 2, where Hydra's own attempt is a traceback (a read-only ``paths.log_dir``).
    A folder whose name does not resolve here is left to Hydra."""
    from coda_exp.errors import USER_ERROR_EXIT
    from coda_exp.resolvers import select_as_in_run
    from coda_exp.run_folder import OutputDirError, check_creatable

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = str(select_as_in_run(cfg, key))  # a run folder's tag reads ${hydra:overrides.task}
    except Exception:  # noqa: BLE001 - resolved by Hydra only (its job's values): Hydra reports it
        return
    try:
        check_creatable(key, folder)
    except OutputDirError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(USER_ERROR_EXIT) from None


def _top_level_like(key: str, overrides: list[str]) -> str | None:
    """The top-level key or config group spelled almost like ``key`` (``model`` for ``modle``), if any."""
    from coda_exp.config_keys import top_level_like as like

    cfg = _composed_without(key, overrides)
    return None if cfg is None else like(cfg, key)


def _composed_without(key: str, overrides: list[str]) -> DictConfig | None:
    """The config composed from ``overrides`` less the one of ``key`` (with Hydra's node: its group choices), for a
    hint about that override; None where it does not compose either."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("~+") != key]
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return compose("train", overrides=rest, return_hydra_config=True)
    except HydraException:
        return None


def _elsewhere(key: str, overrides: list[str], typed_in: list[str] | None = None) -> str:
    """``did you mean data.<name>=...?`` on a line of its own for a key the config lacks (a key of that name in
    another section, or one spelled almost alike), from the config composed without that override; empty when there
    is none or the config does not compose. ``overrides``: one value each (a sweep's job); ``typed_in``: the
    overrides as typed (``optimizer.lrr=1,2``), whose value the hint repeats."""
    from coda_exp.config_keys import same_name_keys

    typed = next((o for o in typed_in or overrides if o.split("=", 1)[0] == key), f"{key}=")
    cfg = _composed_without(key, overrides)
    others = [] if cfg is None else same_name_keys(cfg, key, close=True)  # (the hydra section is left out)
    if not others:
        return ""
    value = typed.split("=", 1)[1]
    return f"\nDid you mean {' or '.join(f'{o}={value}' for o in others[:3])}?"


def _null_group(group: str, overrides: list[str]) -> str:
    """The message for ``debug=null``: a config group takes one of its options' names; its options, and how to
    choose none where the group has no option by default (leave the override out) or a ``none`` option."""
    options = sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))
    message = f"{group}=null: the config group {group} takes one of its options ({', '.join(options)}), not null"
    if "none" in options:
        return f"{message}; to choose none: {group}=none"
    cfg = _composed_without(group, overrides)
    if cfg is None:
        return message
    return message + (f"; it has none by default: leave {group}=null out"
                      if cfg.hydra.runtime.choices.get(group) is None else "")


def _other_group(group: str, overrides: list[str]) -> str:
    """For ``model/attention=coda`` where the model has no such group (a Transformer chooses ``model/scoring``):
    which groups of ``model/`` it has, with the override that chooses one, from the config composed without it;
    empty for a group of another section, or when the config does not compose."""
    section, _, _ = group.rpartition("/")
    if section != "model":
        return ""
    value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("~+") == group and "=" in o), "")
    cfg = _composed_without(group, overrides)
    if cfg is None:
        return ""
    own = sorted(g for g, choice in cfg.hydra.runtime.choices.items() if g.startswith("model/"))
    name = cfg.model.get("name")
    if not own:
        return f"\nmodel={name} has no {group}: it takes no option of that group"
    ways = " or ".join(f"{g}={value}" for g in own)
    return (f"\nmodel={name} has no {group}; its own group{'s are' if len(own) > 1 else ' is'} {', '.join(own)}: "
            f"did you mean {ways}?")
