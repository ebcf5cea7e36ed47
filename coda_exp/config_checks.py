"""Type and range checks of the composed config's numeric keys, run before any data is loaded.

One :class:`ConfigError` lists every bad key with its value and what was expected (``task.epochs = -1: expected
an int >= 1``), instead of a bare assertion inside Lightning after the data has loaded, a negative batch size
caught by torch without the key, or ``task.epochs=-1`` training nothing and recording a "finished" run. A key that
is an interpolation of a key already reported (``trainer.max_epochs: ${task.epochs}``) is not reported twice. A
key absent from the config is not checked (a family may not use it), unless every run reads it (:data:`REQUIRED`:
``~seed`` is one message, not a traceback where the run first reads it).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from coda_exp.config_keys import absent_references, raw_interpolation
from coda_exp.errors import UserError

_ABSENT = object()


class ConfigError(UserError, ValueError):
    """Config values of the wrong type or out of range; the message names every bad key."""


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int_at_least(lo: int, *, null: bool = False, also: tuple = ()) -> tuple[Callable[[Any], bool], str]:
    extra = "".join(f" or {x}" for x in also) + (" or null" if null else "")
    return (lambda v: (null and v is None) or (_int(v) and (v >= lo or v in also)), f"an int >= {lo}{extra}")


def _interval(lo: int) -> tuple[Callable[[Any], bool], str]:
    """Lightning's val_check_interval (lo=1) / limit_*_batches (lo=0): an int count >= lo, a float fraction of an
    epoch (in (0, 1], or [0, 1] with lo=0), or null."""
    ok = (lambda v: v is None or (_int(v) and v >= lo)
          or (isinstance(v, float) and (0.0 < v or lo == 0) and 0.0 <= v <= 1.0))
    fraction = "(0, 1]" if lo else "[0, 1]"
    return ok, f"an int >= {lo} (batches), a float in {fraction} (fraction of an epoch) or null"


_POSITIVE = (lambda v: _number(v) and v > 0, "a number > 0")
_PROBABILITY = (lambda v: _number(v) and 0 <= v < 1, "a probability in [0, 1)")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_NON_NEGATIVE_OR_NULL = (lambda v: v is None or (_number(v) and v >= 0), "a number >= 0 or null")

#: key -> (predicate, what was expected)
CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "seed": (lambda v: _int(v) and 0 <= v <= 2**32 - 1, "an int in [0, 4294967295] (2**32 - 1)"),
    # "no" or "maybe" is a string, which Python takes for true: a record written or a test run all the same
    **{key: _BOOL for key in ("verbose", "save_record", "save_predictions", "test_after_fit")},
    "resume": (lambda v: v in (None, "auto", "force"),
               ("auto, force or null (null: a fresh run; ckpt_path=... resumes a given checkpoint; force: resumes it "
                "even under another configuration)")),
    "threads": _int_at_least(1, null=True),
    "task.epochs": _int_at_least(1),
    "task.max_steps": _int_at_least(1, null=True, also=(-1,)),
    "task.patience": _int_at_least(0, null=True),
    "task.val_check_interval": _interval(1),
    "task.check_val_every_n_epoch": _int_at_least(1, null=True),
    "task.average_last": _int_at_least(0, null=True),
    "task.gradient_clip_val": _NON_NEGATIVE_OR_NULL,
    "task.monitor_mode": (lambda v: v in ("min", "max"), "min or max"),
    "task.module.label_smoothing": _PROBABILITY,
    **{f"task.module.{node}.{key}": check for node in ("decoding", "val_decoding") for key, check in (
        ("strategy", (lambda v: v in ("greedy", "beam"), "greedy or beam")), ("beam_size", _int_at_least(1)),
        ("max_len", _int_at_least(1)), ("max_len_a", _NON_NEGATIVE_OR_NULL),
        ("max_len_b", (lambda v: _number(v) and v >= 0, "a number >= 0")),
        ("length_penalty", (_number, "a number")), ("use_cache", _BOOL))},  # other keys: _decoding_problems
    "trainer.max_epochs": _int_at_least(1, null=True, also=(-1,)),
    "trainer.max_steps": _int_at_least(1, also=(-1,)),
    "trainer.val_check_interval": _interval(1),
    "trainer.check_val_every_n_epoch": _int_at_least(1, null=True),
    "trainer.log_every_n_steps": _int_at_least(1),
    "trainer.num_sanity_val_steps": _int_at_least(0, also=(-1,)),
    "trainer.limit_train_batches": _interval(0),
    "trainer.limit_val_batches": _interval(0),
    "trainer.limit_test_batches": _interval(0),
    "trainer.gradient_clip_val": _NON_NEGATIVE_OR_NULL,
    "trainer.accumulate_grad_batches": _int_at_least(1),
    "data.batch_size": _int_at_least(1),
    "data.eval_batch_size": _int_at_least(1, null=True),  # null: the training batch size
    "data.max_tokens": _int_at_least(1, null=True),
    "data.num_workers": _int_at_least(0),
    "data.max_train_examples": _int_at_least(1, null=True),
    "data.max_eval_examples": _int_at_least(1, null=True),
    # lengths and sizes of every data family (a negative cap would slice tokens away silently)
    **{f"data.{key}": _int_at_least(1, null=True) for key in (
        "max_len", "max_len_query", "max_len_passage_train", "max_len_passage_eval", "max_len_claim",
        "max_len_evidence", "max_word_len", "max_sentences", "max_vocab", "bucket_width", "num_train",
        "num_validation", "num_test", "nei_sentences", "bpe_vocab_size", "retrieval.pages", "retrieval.sentences",
        "retrieval.ngram")},
    # 2**hash_bits TF-IDF buckets: above 2**30 the index does not fit (retrieval.RETRIEVAL_RANGES, which a test
    # pins to this; imported here it would bring the data package in before Hydra's logging starts)
    "data.retrieval.hash_bits": (lambda v: _int(v) and 1 <= v <= 30, "an int in [1, 30]"),
    **{f"data.{key}": _int_at_least(0, null=True) for key in ("min_freq", "min_words", "bpe_min_frequency")},
    "data.val_fraction": (lambda v: v is None or (_number(v) and 0 <= v < 1), "a number in [0, 1) or null"),
    "data.validation_from_train": (lambda v: v is None or (_number(v) and 0 < v < 1),
                                   "a fraction in (0, 1) of the training examples held out for validation, or null"),
    "data.max_len_a": _NON_NEGATIVE_OR_NULL,
    "data.max_len_b": _NON_NEGATIVE_OR_NULL,
    # model sizes and dropout rates (a negative size or a rate of 1.5 fails deep inside torch, after the data)
    **{f"model.{key}": _int_at_least(1, null=True) for key in (
        "hidden_size", "embedding_dim", "d_model", "d_ff", "num_layers", "num_heads", "max_len", "encoder_layers",
        "fm_factors", "char_dim", "char_hidden", "num_fc_layers", "intra_max_distance")},
    **{f"model.{key}": _PROBABILITY for key in ("dropout", "attention_dropout", "relu_dropout")},
    "optimizer.lr": _POSITIVE,
}


#: keys a run reads whatever its task and model (a section first, then its keys): ``~seed`` must not remove them
REQUIRED = ("seed", "scale_name", "paths", "paths.output_dir", "paths.results_dir", "paths.log_dir", "task",
            "task.name", "task.family", "task.monitor", "task.monitor_mode", "task.module", "model", "model.name",
            "model._target_", "data", "data._target_", "optimizer", "trainer")


def _scheduler_key(cfg: DictConfig) -> str:
    """The key a user overrides for the schedule: ``scheduler``, or the node it interpolates (``task.cpu_scheduler``)."""
    return (raw_interpolation(cfg, "scheduler") or "scheduler").strip("${}")


def _value(cfg: DictConfig, key: str) -> tuple[Any, str | None]:
    """(resolved value or _ABSENT, the raw interpolation string if the node is one)."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if not isinstance(parent, DictConfig) or leaf not in parent:
        return _ABSENT, None
    raw = raw_interpolation(parent, leaf)
    try:
        return parent[leaf], raw
    except OmegaConfBaseException as err:  # an interpolation that does not resolve
        return f"<unresolvable: {err}>", raw


def _schedule_problem(cfg: DictConfig) -> tuple[str, str] | None:
    """(key, message) when the learning-rate schedule cannot fit the training budget: a warm-up (plus hold) longer
    than ``total_steps`` (e.g. ``task=mlu scale=cpu task.max_steps=30`` with the recipe's 200 warm-up steps)."""
    node = cfg.get("scheduler") if "scheduler" in cfg else None
    if not isinstance(node, DictConfig) or not {"warmup_steps", "total_steps"} <= set(node):
        return None
    source = _scheduler_key(cfg)  # e.g. task.cpu_scheduler: name the keys a user overrides
    try:
        warmup, hold, total = node.warmup_steps, node.get("hold_steps", 0) or 0, node.total_steps
    except OmegaConfBaseException:
        return None
    if not all(_int(v) for v in (warmup, hold, total)) or warmup + hold <= total:
        return None
    total_key = (raw_interpolation(node, "total_steps") or f"{source}.total_steps").strip("${}")
    held = f" + hold_steps {hold}" if hold else ""
    message = (f"{source}.warmup_steps = {warmup}{held} exceeds {total_key} = {total}: the schedule must warm up "
               f"within the training budget; lower {source}.warmup_steps (e.g. {source}.warmup_steps="
               f"{max(1, total // 10)}: another configuration, which the paper tables list apart from theirs) or "
               f"raise {total_key}")
    return f"{source}.warmup_steps", message


#: coda_exp.optim's schedules that give the learning rate themselves (the optimizer's lr multiplies it: 1.0), with
#: the key of each that sets the peak rate instead
UNIT_LR_SCHEDULES = {"noam_schedule": "factor", "linear_warmup_rsqrt_decay": "peak_lr", "warmup_cosine": "peak_lr"}


def _unit_lr_problem(cfg: DictConfig) -> str | None:
    """``optimizer.lr`` other than 1.0 under a schedule of :data:`UNIT_LR_SCHEDULES` (``task=mlu model=transformer
    optimizer.lr=0.001``): the schedule refused it once the data had loaded and the model was built."""
    (lr, _), (node, _) = _value(cfg, "optimizer.lr"), _value(cfg, "scheduler")
    target = str(node.get("_target_", "")) if isinstance(node, DictConfig) else ""
    name = target.rpartition(".")[2]
    if not target.startswith("coda_exp.optim.") or name not in UNIT_LR_SCHEDULES or not _number(lr) or lr == 1.0:
        return None
    source = _scheduler_key(cfg)
    return (f"optimizer.lr = {lr!r}: expected 1.0 under the schedule {name} ({source}._target_), which gives the "
            f"learning rate itself (the optimizer's lr multiplies it); set optimizer.lr=1.0 and change the peak with "
            f"{source}.{UNIT_LR_SCHEDULES[name]}=...")


def missing_keys(cfg: DictConfig) -> list[str]:
    """The keys left at ``???`` (a mandatory value no config or override gave: ``data.dataset`` of a new task's YAML
    that lacks ``dataset:``), without resolving anything; the ``hydra`` section left out."""
    found: list[str] = []

    def walk(node, prefix: str) -> None:  # (OmegaConf.missing_keys reads every interpolation, resolving it)
        for key in (node.keys() if isinstance(node, DictConfig) else range(len(node))):
            path = f"{prefix}{key}"
            if OmegaConf.is_interpolation(node, key) or path == "hydra":
                continue
            if OmegaConf.is_missing(node, key):
                found.append(path)
            elif isinstance(child := node[key], (DictConfig, ListConfig)):  # (not an interpolation: nothing resolves)
                walk(child, f"{path}.")

    walk(cfg, "")
    return found


def _missing_problem(key: str) -> str:
    where = "the task's YAML (configs/task/<task>.yaml, under data:)" if key.startswith("data.") else "its YAML"
    return f"{key} = ???: a mandatory value that no config or override gives: give it ({key}=...) or set it in {where}"


def _validation_problem(cfg: DictConfig) -> str | None:
    """A step-bounded run that would never validate: ``trainer.val_check_interval`` batches (an int) beyond its
    ``max_steps`` with no validation at epoch ends (``check_val_every_n_epoch: null``, as MLU's stream): no best
    checkpoint is chosen and the last weights are tested, with an empty validation curve."""
    (every, raw), (steps, _), (epochs, _) = (_value(cfg, f"trainer.{k}") for k in
                                             ("val_check_interval", "max_steps", "check_val_every_n_epoch"))
    accumulate, _ = _value(cfg, "trainer.accumulate_grad_batches")
    accumulate = accumulate if _int(accumulate) and accumulate >= 1 else 1
    if not (_int(every) and _int(steps) and steps > 0 and epochs is None) or every <= steps * accumulate:
        return None
    key = raw.strip("${}").split(":")[-1].split(",")[0] if raw else "trainer.val_check_interval"
    return (f"{key} = {every} batches, beyond the run's {steps} steps{f' x {accumulate} batches' if accumulate > 1 else ''}:"
            f" it would never validate (no best checkpoint, an empty validation curve, the last weights tested); "
            f"e.g. {key}={max(1, steps * accumulate // 2)}")


def _monitor_problem(cfg: DictConfig) -> str | None:
    """What is wrong with ``task.monitor`` (early stopping and the best checkpoint watch it): not a ``val/`` metric,
    or one the task's family (``task.module._target_``: its ``validation_metrics``) never logs; Lightning would
    only refuse it once the first validation is over."""
    monitor, _ = _value(cfg, "task.monitor")
    if monitor is _ABSENT:
        return None
    names = None
    try:
        from coda_exp.node_keys import locate  # not Hydra's get_object: it logs an ERROR for a missing target

        family = locate(str(OmegaConf.select(cfg, "task.module._target_")))
        known = family.validation_metrics(OmegaConf.to_container(cfg.task.module, resolve=True))
        names = sorted(f"val/{name}" for name in known) if known else None
    except (ImportError, ValueError, AttributeError, TypeError, OmegaConfBaseException):
        pass  # no family, or one that does not say: the prefix alone is checked
    if isinstance(monitor, str) and monitor.startswith("val/") and (names is None or monitor in names):
        return None
    expected = (f"a metric the task logs in validation: {', '.join(names)}" if names
                else "a metric the task logs in validation (val/<name>)")
    close = difflib.get_close_matches(str(monitor), names or [], n=1, cutoff=0.6)
    hint = f"; did you mean task.monitor={close[0]}?" if close else ""
    return f"task.monitor = {monitor!r}: expected {expected}{hint}"


def _heads_problem(cfg: DictConfig) -> str | None:
    """A Transformer's width that its heads cannot share (``model.d_model=130 model.num_heads=3``): torch would refuse
    it once the data had loaded and the model was built."""
    (width, _), (heads, _) = _value(cfg, "model.d_model"), _value(cfg, "model.num_heads")
    if not (_int(width) and _int(heads) and width >= 1 and heads >= 1) or width % heads == 0:
        return None
    divisors = [h for h in range(1, width + 1) if width % h == 0]
    nearest = min(divisors, key=lambda h: (abs(h - heads), h))
    return (f"model.d_model = {width} is not divisible by model.num_heads = {heads}: each head takes d_model / "
            f"num_heads dimensions; e.g. model.num_heads={nearest} or model.d_model={-(-width // heads) * heads}")


def _decoding_problems(cfg: DictConfig) -> dict[str, str]:
    """Keys of ``task.module.decoding`` / ``val_decoding`` that their strategy does not take (a misspelt cap, or
    ``beam_size`` under greedy), which decoding used to ignore without a word (``models.decoding.decoding_problem``).
    A strategy CHECKS refused is not reported twice."""
    problems = {}
    for node in ("decoding", "val_decoding"):
        key = f"task.module.{node}"
        value, _ = _value(cfg, key)
        strategy = value.get("strategy", "greedy") if isinstance(value, DictConfig) else None
        if strategy not in ("greedy", "beam"):
            continue
        from coda_exp.models.decoding import decoding_problem

        problem = decoding_problem({**{str(k): None for k in value}, "strategy": strategy}, key)
        if problem is not None:
            problems[key] = problem
    return problems


def _group_node_problems(cfg: DictConfig) -> dict[str, str]:
    """A value where a model's config group puts a node: ``model.attention=coda`` (a dot for the group's slash)
    replaces the attention's node with the string "coda", which the model would try to call once the data had
    loaded."""
    from coda_exp.environment import config_dir

    problems = {}
    folder = config_dir() / "model"
    for group in sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        value, _ = _value(cfg, f"model.{group}")
        if value is _ABSENT or value is None or isinstance(value, DictConfig):
            continue
        options = sorted(p.stem for p in (folder / group).glob("*.yaml"))
        choice = str(value) if str(value) in options else f"<{' or '.join(options)}>"
        problems[f"model.{group}"] = (f"model.{group} = {value!r}: expected a config node, an option of the group "
                                      f"model/{group}: choose it with a slash, model/{group}={choice}")
    return problems


def check_config(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` listing every key of :data:`CHECKS` whose value is of the wrong type or range,
    and a schedule that does not fit the budget (:func:`config_problems`). Your own modules (``imports``, the
    ``coda_exp.plugins`` entry points) are imported first: their readers and classes are what the checks look up."""
    from coda_exp import plugins
    from coda_exp.config_nodes import anchor_paths

    anchor_paths(cfg)  # a relative data.dir or imports path, absolute in the saved config and checkpoint
    plugins.load(cfg)
    bad = config_problems(cfg)
    if bad:
        raise ConfigError("invalid config values (fix the override or the YAML):\n  " + "\n  ".join(bad.values()))


def config_problems(cfg: DictConfig, imports: bool = True) -> dict[str, str]:
    """Each bad key with its message (:func:`check_config`). ``imports=False`` leaves out the checks that import the
    task's family or the models (``task.monitor``, the decoding keys), for a caller that must not import Lightning
    before Hydra sets up logging (a sweep's jobs, checked before the first starts: :mod:`coda_exp.sweeps`)."""
    bad: dict[str, str] = {key: _missing_problem(key) for key in missing_keys(cfg)}
    for key in REQUIRED:
        if _value(cfg, key)[0] is _ABSENT and not any(key.startswith(f"{other}.") for other in bad):
            bad[key] = f"{key} is required and absent (~{key} removes it): give it a value instead"
    for key, problem in absent_references(cfg).items():
        bad.setdefault(key, problem)
    for key, (ok, expected) in CHECKS.items():
        value, raw = _value(cfg, key)
        if value is _ABSENT or ok(value) or key in bad:
            continue
        if raw is not None and any(other in raw for other in bad):
            continue  # e.g. trainer.max_epochs: ${task.epochs} with task.epochs already reported
        source = f" (from {raw})" if raw is not None else ""
        bad[key] = f"{key} = {value!r}{source}: expected {expected}"
    for key, problem in (("task.monitor", _monitor_problem(cfg) if imports else None),
                         ("model.num_heads", _heads_problem(cfg)),
                         ("task.val_check_interval", _validation_problem(cfg)), ("optimizer.lr", _unit_lr_problem(cfg))):
        if problem is not None and key not in bad:
            bad[key] = problem
    bad.update(_group_node_problems(cfg))
    from coda_exp.config_nodes import coda_option_problems, path_problems

    for key, (problem, raw) in {**path_problems(cfg), **coda_option_problems(cfg)}.items():
        if key not in bad and not (raw is not None and any(other in raw for other in bad)):
            bad[key] = problem
    bad.update(_decoding_problems(cfg) if imports else {})
    schedule = None if any(k.startswith(("task.max_steps", "trainer.max_steps")) for k in bad) else _schedule_problem(cfg)
    if schedule is not None:
        bad[schedule[0]] = schedule[1]
    return bad


def composition_error(err: Exception) -> ConfigError:
    """Hydra's refusal to compose a config (an unknown option, a key the config lacks, an override it cannot parse)
    as a ConfigError: its message without the config search path Hydra appends, which is no help to a user."""
    message = str(err).split("\nConfig search path:")[0].strip()
    cause = err.__cause__
    if message.startswith("Error merging override") and isinstance(cause, OmegaConfBaseException):
        # a typed key's value of another type (hydra.launcher.n_jobs=abc): OmegaConf's reason, with the key's type
        typed = getattr(cause.object_type, "__name__", None)
        where = f" ({cause.full_key} is typed in {typed})" if getattr(cause, "full_key", None) and typed else ""
        message = f"{message}: {str(cause).splitlines()[0]}{where}"
    return ConfigError(message)


def yaml_error(err: BaseException) -> ConfigError | None:
    """A YAML file PyYAML cannot read (a config Hydra composes, ``configs/local/default.yaml``...) behind ``err``, as
    one message naming the file, line and column (1-based) and what is wrong, or None for another error."""
    import yaml

    from coda_exp.errors import cause_of

    found = cause_of(err, yaml.YAMLError)
    if found is None:
        return None
    mark = getattr(found, "problem_mark", None) or getattr(found, "context_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "a config file"
    problem = getattr(found, "problem", None) or str(found).splitlines()[0]
    context = getattr(found, "context", None)
    context_mark = getattr(found, "context_mark", None)
    if context and context_mark is not None and context_mark is not mark:
        context = f"{context} started at line {context_mark.line + 1}, column {context_mark.column + 1}"
    return ConfigError(f"{where}: {problem}{f' ({context})' if context else ''}: not valid YAML; fix that file")
