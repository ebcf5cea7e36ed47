"""A run's ``config_resolved.yaml`` (and, where it resumes, the config and overrides of each resume beside it);
split from ``coda_exp.run_folder`` (at its size limit), whose folder claims it relies on."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from coda_exp.run_folder import RESOLVED_CONFIG

log = logging.getLogger(__name__)


def save_resolved_config(cfg, overrides: list[str] | None = None) -> Path:
    """The fully resolved config beside the run's outputs: what scripts (plots, analysis) rebuild a run from. A
    resumed run keeps its folder's first one and writes its own beside it (``config_resolved.resumed-<time>.yaml``),
    with this command's ``overrides`` (Hydra's ``.hydra/overrides.yaml`` of the job; None: not a Hydra job) as
    ``overrides.resumed-<time>.yaml``, the same time: the job's own Hydra folder goes (``remove_job_folder``); a first
    one that cannot be read is moved aside (``config_resolved.unreadable-<time>.yaml``) and written again."""
    from omegaconf import OmegaConf

    from coda_exp import results

    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESOLVED_CONFIG
    if cfg.get("ckpt_path") and (path.exists() or (out / "checkpoints").is_dir()):  # resumed in its run's folder
        from datetime import datetime, timezone

        # to the microsecond, so that two resumes within a second keep both files and the names sort by time
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H%M%S.%f+0000")
        if overrides is not None:
            results.atomic_write_text(out / f"overrides.resumed-{stamp}.yaml",
                                      OmegaConf.to_yaml(OmegaConf.create([str(o) for o in overrides])))
        if _readable(path):
            path = out / RESOLVED_CONFIG.replace(".yaml", f".resumed-{stamp}.yaml")
        elif path.exists():  # cut short or hand-edited (resume=auto read the checkpoint's config): kept aside,
            # written again
            aside = out / RESOLVED_CONFIG.replace(".yaml", f".unreadable-{stamp}.yaml")
            os.replace(path, aside)
            log.warning("%s cannot be read: kept as %s; the resumed run writes it again", path, aside.name)
    results.atomic_write_text(path, OmegaConf.to_yaml(cfg, resolve=True))
    return path


def _readable(path: Path) -> bool:
    from omegaconf import DictConfig, OmegaConf

    try:
        return isinstance(OmegaConf.load(path), DictConfig)
    except Exception:  # noqa: BLE001 - any parse error: unreadable
        return False
