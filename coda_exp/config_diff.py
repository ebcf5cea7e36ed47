"""How two runs' resolved configurations differ, each run's own folder set aside: whether ``resume=auto`` found the
same run (:func:`normalised`), and what a checkpoint resumed with ``ckpt_path=`` or averaged with others was trained
with otherwise (:func:`configuration_changes`). Below the run checks, ``auto_resume`` and ``checkpoint_avg``, which
all use it; it reads configs only."""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf, open_dict

from coda_exp.config_keys import leaves
from coda_exp.fingerprint import BUDGET_KEYS, OUTPUT_KEYS, PARALLEL_KEYS

IGNORED = ("ckpt_path", "resume", "verbose")  # top-level keys that change no result
# ``paths`` keys that only feed others which are compared (``paths.results_dir`` follows ``results_root``): a run of
# code before them is the same run
DERIVED_PATHS = ("results_root",)


def normalised(config: dict) -> dict:
    """The config with the run's own folder (its ``paths.output_dir``, as it was written there: a path through a
    symbolic link stays one) replaced by a placeholder and the ignored keys (and :data:`DERIVED_PATHS`) left out."""
    folder = str((config.get("paths") or {}).get("output_dir") or "") or "\0"

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and folder in value:
            return value.replace(folder, "<run>")
        return value

    out = {k: walk(v) for k, v in config.items() if k not in IGNORED}
    if isinstance(out.get("paths"), dict):
        root = str(out["paths"].get("root_dir") or "")
        out["paths"] = {k: _under(root, v) for k, v in out["paths"].items() if k not in DERIVED_PATHS}
    return out


def _under(root: str, value):
    """A relative folder of ``paths`` as the absolute one under ``root`` it names when run from the project's root
    (``results/mlu_gate_ablation``, which an experiment used to set, is ``<root>/results/mlu_gate_ablation``, as it
    is now written): a run of either spelling is the same run."""
    if not root or not isinstance(value, str) or not value or value.startswith(("/", "<run>", "${")):
        return value
    return os.path.normpath(os.path.join(root, value))


def configuration_changes(cfg: DictConfig, trained: dict) -> list[str]:
    """The keys whose values differ between the resolved config ``trained`` (a checkpoint's) and ``cfg``'s, with
    ``cfg``'s budget keys (``fingerprint.BUDGET_KEYS``: a resumed run may train longer) set to the checkpoint's
    before resolving, so what derives from them (``task.patience``, a schedule's total steps) follows; where a run
    is stored, logged or placed (``fingerprint.OUTPUT_KEYS``; the number of devices and nodes, ``PARALLEL_KEYS``: a
    job requeued on another number of GPUs goes on, as Lightning resumes it), each run's own folder and a callback only one of
    them has (``+callbacks.x=...``, ``callbacks=gate_stats``) do not count."""
    mine, node = cfg.copy(), OmegaConf.create(trained)
    with open_dict(mine):
        for key in BUDGET_KEYS:
            theirs = OmegaConf.select(node, key, default=None)
            if "." in key and theirs is not None and OmegaConf.select(mine, key, default=None) is not None:
                OmegaConf.update(mine, key, theirs, merge=False)
    a = leaves(normalised(OmegaConf.to_container(mine, resolve=True)))
    b = leaves(normalised(trained))
    skipped = (*OUTPUT_KEYS, *PARALLEL_KEYS, *BUDGET_KEYS, *IGNORED)  # a requeued job on other devices resumes

    def added_callback(key: str) -> bool:  # a callback on one side only measures or stops; one on both counts
        parts = key.split(".")
        return parts[0] == "callbacks" and len(parts) > 2 and not all(
            any(k.startswith(f"callbacks.{parts[1]}.") for k in side) for side in (a, b))

    return sorted(k for k in a.keys() | b.keys() if a.get(k, "<absent>") != b.get(k, "<absent>")
                  and not any(k == s or k.startswith(f"{s}.") for s in skipped) and not added_callback(k))
