"""The configs' own OmegaConf resolvers, registered on import (by the entry point and by the pipeline)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf


def dir_if_exists(path: str) -> str | None:
    """``${dir_if_exists:PATH}``: PATH when it is a folder, else null. The data bases (configs/data/*.yaml) read
    ``data/<task>/`` when it holds the official files and otherwise leave ``data.dir`` null (the hub, or MLU's
    generator), so a run's resolved config records which folder it read."""
    return str(path) if path is not None and Path(path).is_dir() else None


OmegaConf.register_new_resolver("dir_if_exists", dir_if_exists, replace=True)
