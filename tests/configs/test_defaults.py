"""Code defaults equal the YAML. For every coda_exp class (or factory) that a composed config instantiates, at the
paper's scale: a value the YAML sets that differs from the constructor's default must say why (a comment on the
YAML line that sets it) or be in ALLOWED; and no parameter with a default is left out of the YAML (no hidden
hyper-parameter), unless ALLOWED says why. Third-party classes (torch, Lightning) keep their own defaults."""

from __future__ import annotations

import inspect
from collections import defaultdict
from functools import cache

import pytest
import yaml
from hydra.utils import get_object
from omegaconf import OmegaConf

from coda_exp import pipeline
from coda_exp.pipeline import META_KEYS
from tests import ROOT

CONFIGS = ROOT / "configs"
# (class or function name, parameter): why the YAML may differ from the code default, or leave it out
ALLOWED = {
    ("*", "scheduler_interval"): "every schedule here (T2T's) steps per optimizer step: a mechanism, not a choice",
    ("DecaProp", "attention"): "null = DecaProp's softmax; decaprop_coda.yaml injects CoDA (defaults: attention: coda)",
    ("*", "fast"): "the fast path's options come from the top-level `fast` node (trainer=gpu_fast), not task.module",
}
# passed by the pipeline besides the config (datamodule.model_kwargs / task_kwargs, the scheduler factory)
RUNTIME = {"vocab_size", "src_vocab_size", "tgt_vocab_size", "num_classes", "embeddings", "pad_id", "bos_id",
           "eos_id", "unk_id", "decode_text", "targets", "evaluations", "run_info", "test_sets", "scheduler",
           "char_vocab_size"}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def allowed(name: str, key: str) -> bool:
    return (name, key) in ALLOWED or ("*", key) in ALLOWED


def parameters(target) -> dict[str, inspect.Parameter]:
    """The parameters a class (following ``**kwargs`` up its bases) or a factory function accepts; those of
    third-party bases (Lightning's EarlyStopping) keep their library's defaults and are left out."""
    out: dict[str, inspect.Parameter] = {}
    for owner in (target.__mro__ if inspect.isclass(target) else [target]):
        init = owner.__init__ if inspect.isclass(target) else owner
        if inspect.isclass(target) and "__init__" not in vars(owner):
            continue
        sig = inspect.signature(init)
        if not owner.__module__.startswith("coda_exp."):
            break
        for name, p in sig.parameters.items():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name != "self":
                out.setdefault(name, p)
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            break
    return out


@cache
def yaml_index() -> dict[str, list[tuple[object, bool, str]]]:
    """key path (``data.batch_size``) -> (value, the line has a comment, file:line) for every YAML leaf."""
    out = defaultdict(list)
    for f in sorted(CONFIGS.rglob("*.yaml")):
        rel = f.relative_to(CONFIGS)
        if rel.parts[0] in ("tables", "local"):
            continue
        text = f.read_text()
        lines = text.splitlines()
        glob = len(rel.parts) == 1 or "@package _global_" in text.split("\n", 1)[0]
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()

        def walk(node, path, loader=loader, lines=lines, rel=rel):
            for k, v in node.value:  # a comment on the key's line explains its value (a scalar or a block)
                line = k.start_mark.line
                out[".".join([*path, k.value])].append(
                    (loader.construct_object(v, deep=True), "#" in lines[line][k.start_mark.column:], f"{rel}:{line + 1}"))
                if isinstance(v, yaml.MappingNode):
                    walk(v, [*path, k.value])

        if isinstance(root, yaml.MappingNode):
            walk(root, [] if glob else list(rel.parts[:-1]))
    return out


def targets(raw, resolved, path=""):
    """(path, unresolved node, resolved node) of every coda_exp ``_target_`` in a composed config."""
    if isinstance(resolved, dict):
        if str(resolved.get("_target_", "")).startswith("coda_exp."):
            yield path, raw, resolved
        for k, v in resolved.items():
            yield from targets(raw[k], v, f"{path}.{k}" if path else str(k))


@cache
def _yaml(path: str) -> dict:
    return yaml.safe_load((CONFIGS / path).read_text()) or {}


def serves(model: str, task: str) -> bool:
    """Whether the model's YAML lists the task's family (read without composing; a model that inherits its
    ``families`` from another file counts as serving: the composition then decides)."""
    families = _yaml(f"model/{model}.yaml").get("families")
    family = (_yaml(f"task/{task}.yaml").get("task") or {}).get("family")
    return families is None or family is None or family in families


def compositions(make_cfg, every_pair: bool = True):
    """Every task with each model that serves it, at the paper's scale (the configs' own values). Without
    ``every_pair``: every task with its first serving model, and every model with the first task it serves (each
    task node and each model node is checked once; the full product is the slow test's)."""
    tasks_seen, models_seen = set(), set()
    for task in options("task"):
        for model in options("model"):
            if model.startswith("coda_transformer_") and task != "mlu":
                continue  # the gate-study variants differ from coda_transformer in scoring keys only: one task is enough
            if not every_pair and (task in tasks_seen and model in models_seen or not serves(model, task)):
                continue
            cfg = make_cfg(f"task={task}", f"model={model}")
            if cfg.task.family in cfg.model.families and not pipeline.unknown_model_keys(cfg):
                tasks_seen.add(task)
                models_seen.add(model)
                yield f"task={task} model={model}", cfg  # (a pairing the pipeline refuses is test_configs' case)


def problems(cfg) -> list[str]:
    raw = OmegaConf.to_container(cfg, resolve=False)
    out = []
    for path, raw_node, node in targets(raw, OmegaConf.to_container(cfg, resolve=True)):
        target = get_object(node["_target_"])
        name = getattr(target, "__name__", str(target))
        params = parameters(target)
        for key, value in node.items():
            if key.startswith("_") or key in META_KEYS:
                continue
            if key not in params:
                accepted = inspect.signature(target).parameters
                if key not in accepted and not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
                    out.append(f"{path}.{key}: {name} has no parameter {key!r}")
                continue
            default = params[key].default
            if default is inspect.Parameter.empty or value == (list(default) if isinstance(default, tuple)
                                                              else default) or allowed(name, key):
                continue
            if isinstance(raw_node[key], str) and "${" in raw_node[key]:
                continue  # wired to another key (seed, paths, task.patience): that key holds the value
            said = [w for v, commented, w in yaml_index().get(f"{path}.{key}", []) if v == raw_node[key] and commented]
            if not said:
                out.append(f"{path}.{key}: {value!r} in the YAML, {default!r} in {name}'s signature, and no YAML "
                           "line setting it says why (a comment) nor does ALLOWED")
        hidden = [k for k, p in params.items() if p.default is not inspect.Parameter.empty and k not in node
                  and k not in RUNTIME and not allowed(name, k)]
        if hidden:
            out.append(f"{path} ({name}): parameters with a code default that no YAML shows: {hidden}")
    return out


@pytest.mark.parametrize("every_pair", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_code_defaults_equal_the_yaml(make_cfg, every_pair):
    found = {}
    for label, cfg in compositions(make_cfg, every_pair):
        for p in problems(cfg):
            found.setdefault(p, label)
    assert not found, "\n".join(f"{p}   [{label}]" for p, label in found.items())


def test_a_silent_difference_or_a_hidden_default_is_reported(make_cfg):
    from omegaconf import open_dict

    cfg = make_cfg("task=snli", "model=decompatt", "data.min_freq=2")  # no YAML line says why 2
    with open_dict(cfg):
        del cfg.model["intra_max_distance"]  # a parameter with a default that the YAML no longer shows
    found = "\n".join(problems(cfg))
    assert "data.min_freq: 2 in the YAML, 1 in PairDataModule's signature" in found
    assert "model (DecompAtt): parameters with a code default that no YAML shows: ['intra_max_distance']" in found
    assert not problems(make_cfg("task=scitail", "model=decompatt"))  # batch 32: its line says why


def test_optional_group_choices_show_their_defaults(make_cfg):
    """Options that no task or model composes by default (callbacks=gate_stats) follow the same rule."""
    cfg = make_cfg("task=mlu", "model=coda_transformer", "callbacks=gate_stats")
    assert cfg.callbacks.gate_stats._target_ == "coda_exp.callbacks.GateStats" and not problems(cfg)
