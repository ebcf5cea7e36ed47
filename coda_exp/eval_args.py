"""The command line of ``coda-exp eval`` and ``coda-exp predict`` (:func:`parse`): ``key=value`` overrides sorted into
the command's own keys, this machine's settings (:data:`ENVIRONMENT`) and changes to the trained configuration, and
the overrides refused once the checkpoint's configuration is read (:func:`refusal`). Split out of
:mod:`coda_exp.trained` (which re-exports these); the kinds are described there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from coda_exp.config_checks import ConfigError

#: top-level keys composed from this machine's configs (a group choice or its keys)
ENVIRONMENT = ("paths", "logger", "trainer", "threads", "save_record", "save_predictions", "imports")
COMMAND_KEYS = {"eval": {"ckpt_path": None, "split": "all"}, "predict": {"ckpt_path": None, "input": None,
                                                                         "output": None}}
SPLITS = ("all", "test", "validation")
#: keys that only steer training: an evaluation would carry them into its fingerprint, naming a run never trained
TRAINING_ONLY = ("optimizer", "scheduler", "task.epochs", "task.max_steps", "task.patience", "task.val_check_interval",
                 "task.check_val_every_n_epoch", "task.gradient_clip_val")


@dataclass
class Invocation:
    """One ``coda-exp eval|predict`` command line, sorted (module docstring)."""

    mode: str
    command: dict[str, str | None]
    environment: list[str] = field(default_factory=list)
    config: list = field(default_factory=list)  # hydra Override objects: changes to the trained configuration
    refused: list = field(default_factory=list)  # (override, its top key): refused once the checkpoint's config is read

    @property
    def ckpt_path(self) -> Path:
        return Path(str(self.command["ckpt_path"])).expanduser()

    def config_strings(self) -> list[str]:
        return [o.input_line for o in self.config]


def parse(mode: str, overrides: list[str]) -> Invocation:
    """Sort ``overrides`` (module docstring); a :class:`ConfigError` names a key that cannot be given."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    for arg in overrides:
        if "=" not in arg and not arg.startswith("~"):  # a bare path: Hydra's grammar error names no fix
            raise ConfigError(f"coda-exp {mode}: {arg}: expected key=value; " + _bare_argument_hint(mode, arg))
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except OverrideParseException as err:
        raise ConfigError(f"coda-exp {mode}: {' '.join(str(err).split())}") from None
    inv = Invocation(mode, dict(COMMAND_KEYS[mode]))
    for o in parsed:
        key = o.key_or_group
        top = key.replace("/", ".").split(".")[0]
        if key in inv.command:
            value = o.value()
            inv.command[key] = None if value is None else str(value)
        elif top in ENVIRONMENT:
            inv.environment.append(o.input_line)
        elif other := next((m for m, keys in COMMAND_KEYS.items() if m != mode and key in keys), None):
            raise ConfigError(f"coda-exp {mode}: {o.input_line}: {key}= is a key of coda-exp {other}, not of "
                              f"{mode} (which takes {', '.join(f'{k}=' for k in inv.command)})")
        elif o.is_delete() or "/" in key or "." not in key or top in ("hydra", "callbacks"):
            inv.refused.append((o.input_line, top))  # build_config: the hint names keys the checkpoint's config has
        elif top == "model" and not key.endswith(".kernel"):
            raise ConfigError(f"coda-exp {mode}: {o.input_line}: the checkpoint's model is the trained one (its "
                              f"weights fit its own configuration only): model.* cannot change, but for how CoDA is "
                              f"computed (model.*.kernel); to try another, train it: coda-exp task=... "
                              f"{o.input_line}")
        elif any(key == k or key.startswith(f"{k}.") for k in TRAINING_ONLY):
            raise ConfigError(f"coda-exp {mode}: {o.input_line}: {mode} trains nothing, and this key only steers "
                              f"training (the checkpoint's value is what it was trained with); to train with it, "
                              f"run training: coda-exp task=... {o.input_line}")
        else:
            inv.config.append(o)
    if not inv.command["ckpt_path"]:
        raise ConfigError(f"coda-exp {mode}: ckpt_path=... is required (a .ckpt written by a training run)")
    if mode == "eval" and inv.command["split"] not in SPLITS:
        raise ConfigError(f"coda-exp eval: split={inv.command['split']}: expected one of {', '.join(SPLITS)}")
    if mode == "predict" and not inv.command["input"]:
        raise ConfigError("coda-exp predict: input=FILE is required (JSON lines or a TSV file with a header; "
                          "docs/running.md)")
    return inv


def _bare_argument_hint(mode: str, arg: str) -> str:
    """What a ``key=value``-less argument of ``coda-exp eval|predict`` was likely meant as."""
    path = Path(arg).expanduser()
    if path.suffix == ".ckpt" or (path.is_file() and path.suffix not in (".jsonl", ".tsv", ".json")):
        return f"did you mean ckpt_path={arg}?"
    if mode == "predict" and path.suffix in (".jsonl", ".tsv", ".json"):
        return f"did you mean input={arg}?"
    return f"coda-exp {mode} takes {', '.join(f'{k}=' for k in COMMAND_KEYS[mode])} and key=value changes"


#: a refused group choice's hint: the first two of these keys that the checkpoint's configuration has
CHANGE_EXAMPLES = ("data.dir", "task.module.decoding.beam_size", "task.module.decoding.strategy", "data.eval_batch_size")


def refusal(inv: Invocation, trained: DictConfig) -> str | None:
    """The first override :func:`parse` set aside (``task=...``, ``~data.dir``), refused naming keys ``trained`` has."""
    if not inv.refused:
        return None
    line, top = inv.refused[0]
    has = [k for k in CHANGE_EXAMPLES
           if OmegaConf.select(trained, k, default="-", throw_on_resolution_failure=False) != "-"][:2]
    return (f"coda-exp {inv.mode}: {line}: the checkpoint's {top} is the trained run's; change a key of its "
            f"configuration instead{' (' + ', '.join(f'{k}=...' for k in has) + ')' if has else ''}, or give "
            f"{', '.join(f'{k}=' for k in inv.command)} or this machine's {', '.join(ENVIRONMENT)}")
