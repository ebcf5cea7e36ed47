"""The keys of a config node with a ``_target_`` against what its class or function takes, before any data loads.

``+model.attention.centre_e=true``, ``+task.module.foo=1``, ``+data.foo=1`` or a misspelt
``task.module._target_`` used to reach Hydra's ``instantiate`` after the data had loaded, as a ``TypeError`` or
"Error locating target" with a traceback. :func:`node_problems` names the key, the class and what was expected;
``run_checks.check_compatible`` raises them as one ``ConfigError``.
"""

from __future__ import annotations

import difflib
import importlib
import inspect

from omegaconf import DictConfig, OmegaConf

META_KEYS = ("name", "families")  # config keys that describe a node but are not constructor arguments


def parameters(target: str) -> tuple[dict[str, inspect.Parameter], bool]:
    """The parameters ``target`` (a class or function path) takes, and whether it takes any keyword besides them. A
    class whose ``__init__`` passes ``**kwargs`` on to its base takes its bases' parameters too (the nearest first)."""
    taken: dict[str, inspect.Parameter] = {}
    obj = locate(target)
    for init in ([c.__init__ for c in obj.__mro__ if "__init__" in vars(c)] if isinstance(obj, type) else [obj]):
        params = inspect.signature(init).parameters
        taken = {**params, **taken}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return taken, False
    return taken, True


def accepted_keys(target: str) -> set[str] | None:
    """The keyword arguments ``target`` (a class or function path) accepts (:func:`parameters`); None when it accepts
    any."""
    taken, any_keyword = parameters(target)
    return None if any_keyword else set(taken)


def _switch_problem(key: str, node: DictConfig, target: str) -> str | None:
    """The keys of ``node`` whose parameter in ``target`` is a switch (a bool default) given a word: ``data.lowercase=no``
    is the string "no", which Python reads as true: the run lowercased while its tag said ``lowercase_no``."""
    bad = []
    for name, param in parameters(target)[0].items():
        if isinstance(param.default, bool) and name in node:
            try:
                value = node.get(name)
            except Exception:  # noqa: BLE001, S112 - an interpolation that does not resolve: the run says so
                continue
            if isinstance(value, str):
                bad.append(f"{key}.{name} = {value!r}: expected true or false")
    return "; ".join(bad) or None


def unknown_keys(node: DictConfig) -> list[str]:
    """The keys of ``node`` that its ``_target_``'s constructor does not accept (:func:`accepted_keys`)."""
    target = node.get("_target_")
    accepted = None if target is None else accepted_keys(str(target))
    if accepted is None:
        return []
    return sorted(str(k) for k in node if not str(k).startswith("_") and k not in META_KEYS and k not in accepted)


def unknown_model_keys(cfg: DictConfig) -> list[str]:
    """The keys of ``cfg.model`` that its ``_target_``'s constructor does not accept."""
    return unknown_keys(cfg.model)


def target_nodes(cfg: DictConfig) -> dict[str, DictConfig]:
    """The instantiated nodes: the model, its own nodes (``model.attention``, ``model.scoring``), ``task.module``,
    ``data``, ``optimizer`` and ``scheduler``; those without ``_target_`` left out."""
    model = cfg.get("model")
    nodes = {"model": model}
    if isinstance(model, DictConfig):
        nodes.update({f"model.{k}": v for k, v in model.items() if isinstance(v, DictConfig)})
    task = cfg.get("task")
    nodes["task.module"] = task.get("module") if isinstance(task, DictConfig) else None
    nodes.update({key: cfg.get(key) for key in ("data", "optimizer", "scheduler")})
    return {key: node for key, node in nodes.items() if isinstance(node, DictConfig) and "_target_" in node}


def locate(path: str) -> object:
    """The object at ``path`` (``package.module.Class``), as Hydra finds a ``_target_``, without its error log."""
    parts = path.split(".")
    obj, i = None, len(parts)
    while i > 0:
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError as err:
            if err.name is None or not ".".join(parts[:i]).startswith(err.name):
                raise  # a module that exists fails to import something of its own
            i -= 1
    if obj is None:
        raise ImportError(f"no module named {parts[0]!r}")
    for part in parts[i:]:
        obj = getattr(obj, part)
    return obj


def _locate_problem(key: str, target: str) -> str | None:
    try:
        locate(target)
        return None
    except (ImportError, AttributeError) as err:
        module, _, name = target.rpartition(".")
        try:
            names = [n for n in dir(locate(module)) if not n.startswith("_")] if module else []
        except (ImportError, AttributeError):
            own = "" if target.startswith("coda_exp.") else " (a module of your own: on PYTHONPATH, or in imports=[...])"
            return f"{key}._target_ = {target!r}: cannot be imported ({err}){own}"
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = f"; did you mean {module}.{close[0]}?" if close else f" ({module} has no {name!r})"
        return f"{key}._target_ = {target!r}: no such class or function{hint}"


def _families(obj: object, key: str) -> tuple[str, ...]:
    """The task families the class at ``key`` serves: a task module's ``FAMILY``, a data module's ``FAMILIES``;
    () where it does not say."""
    served = getattr(obj, "FAMILY" if key == "task.module" else "FAMILIES", None) or ()
    return (served,) if isinstance(served, str) else tuple(served)


def _serving(key: str, family: str) -> list[str]:
    """The shipped classes for ``key`` (``task.module``, ``data``) that serve ``family``, by their paths."""
    if key == "task.module":
        import coda_exp.tasks as package

        classes = [getattr(package, name) for name in package.__all__]
    else:
        from coda_exp.data.common.base import DataModule

        for family_package in ("pair", "text", "seq2seq", "span", "evidence"):
            importlib.import_module(f"coda_exp.data.{family_package}")
        classes, todo = [], [DataModule]
        while todo:
            cls = todo.pop()
            classes.append(cls)
            todo += cls.__subclasses__()
    # as the configs name them: the package that exports the class (coda_exp.data.pair.PairDataModule)
    found = {f"{c.__module__.rsplit('.', 1)[0] if key == 'data' else 'coda_exp.tasks'}.{c.__name__}"
             for c in classes if family in _families(c, key) and not inspect.isabstract(c)
             and c.__module__.startswith("coda_exp.")}
    return sorted(found)


def family_problem(cfg: DictConfig, key: str, target: str) -> str | None:
    """Why the task module or data module at ``key`` (``target``) cannot serve the task's ``family`` (a text
    classification task module on sentence pairs failed with ``KeyError: 'ids'`` in the first step), or None."""
    family = OmegaConf.select(cfg, "task.family", default=None)
    served = _families(locate(target), key)
    if family is None or not served or family in served:
        return None
    fits = _serving(key, str(family))
    where = f"configs/task/{OmegaConf.select(cfg, 'task.name', default='<task>')}.yaml"
    return (f"{key}._target_ = {target} serves task.family {' / '.join(served)}, but the task's family is {family} "
            f"(task.family, {where})" + (f"; for {family}: {key}._target_={' or '.join(fits)}" if fits else ""))


def missing_arguments(node: DictConfig) -> list[str]:
    """The parameters without a default that ``node``'s ``_target_`` requires and ``node`` lacks (``~data.dataset``
    was a ``TypeError`` with a traceback once the run built its data)."""
    obj = locate(str(node._target_))
    init = obj.__init__ if isinstance(obj, type) else obj
    return [name for name, p in inspect.signature(init).parameters.items()
            if name != "self" and p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY) and name not in node]


def reader_problem(name: str) -> str | None:
    """``data.dataset`` that no reader is registered under (``data.dataset=snlii``), named before the run's folder is
    made and any data loads, with the close name (``coda_exp.data.common.readers.get_reader``'s message)."""
    from coda_exp.data.common.errors import DataError
    from coda_exp.data.common.readers import get_reader

    try:
        get_reader(name)
    except DataError as err:
        return str(err)
    return None


def _data_problem(node: DictConfig, target: str) -> str | None:
    """A ``data.dataset`` no reader is registered under (the family's readers registered as its module was located),
    or arguments the data module requires and its node lacks (it is built from the node alone)."""
    if isinstance(node.get("dataset"), str):
        problem = reader_problem(node.dataset)
        if problem:
            return problem
    missing = missing_arguments(node)
    if not missing:
        return None
    return (f"{', '.join(f'data.{k}' for k in missing)} {'is' if len(missing) == 1 else 'are'} required by {target} "
            f"and absent: give {'it a value' if len(missing) == 1 else 'them values'} "
            f"({' '.join(f'+data.{k}=...' for k in missing)} or in the task's YAML)")


def _unknown_keys_problem(key: str, node: DictConfig, target: str) -> str | None:
    """The keys of ``node`` its target does not take, with the close parameter names."""
    unknown = unknown_keys(node)
    if not unknown:
        return None
    accepted = sorted(k for k in accepted_keys(target) or () if k not in ("self", "args", "kwargs"))
    close = {k: difflib.get_close_matches(k, accepted, n=1, cutoff=0.6) for k in unknown}
    hint = "".join(f"; did you mean {key}.{c[0]} for {key}.{k}?" for k, c in close.items() if c)
    return (f"{', '.join(f'{key}.{k}' for k in unknown)} "
            f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of {target}{hint}")


def node_problems(cfg: DictConfig) -> dict[str, str]:
    """Each node of :func:`target_nodes` whose ``_target_`` cannot be imported, that (the task module, the data
    module) serves another task family than ``task.family`` (:func:`family_problem`), whose dataset or required
    arguments are wrong (the data module: :func:`_data_problem`), or which holds keys its target does not take, with
    its first problem's message; the model's own keys are ``run_checks.check_compatible``'s (with their hints)."""
    problems = {}
    for key, node in target_nodes(cfg).items():
        target = str(node._target_)
        problem = (_locate_problem(key, target)
                   or (family_problem(cfg, key, target) if key in ("task.module", "data") else None)
                   or (_data_problem(node, target) if key == "data" else None)
                   or (None if key == "model" else _unknown_keys_problem(key, node, target))
                   or _switch_problem(key, node, target))
        if problem:
            problems[key] = problem
    return problems
