#!/usr/bin/env python
"""Before a sweep launches: can each of its tasks find its data? One message for all of them, instead of every job
failing on its own (``make reproduce-table-N`` runs this first).

    python scripts/check_sweep_data.py experiment=table_2 [scale=paper] [other train.py overrides]

For each task the sweep runs (``hydra.sweeper.params.task``, else the composed ``task``): a ``data.dir`` that is set
must be a folder holding the reader's files (the reader's own check: ``Reader.local_files``); without one, the data
comes from the Hugging Face hub, which needs the reader to have a hub copy and the hub to be reachable (not
``HF_DATASETS_OFFLINE`` / ``HF_HUB_OFFLINE``), or is generated (MLU). Exit 0 when every task can start, 2 with the
list of what each one lacks otherwise; tasks whose reader it does not know are left to the run itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from coda_exp import resolvers  # noqa: F401 (registers ${dir_if_exists:...})
    from coda_exp.environment import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
        return hydra_compose("train", return_hydra_config=True, overrides=overrides)


def sweep_tasks(cfg) -> list[str]:
    params = cfg.hydra.sweeper.get("params") or {}
    if "task" in params:
        return [t.strip() for t in str(params["task"]).split(",") if t.strip()]
    return [cfg.task.name]


def problem(cfg) -> str | None:
    """What keeps this task's runs from reading their data, or None."""
    from hydra.utils import get_class

    import coda_exp.data  # noqa: F401 (registers every family's readers)
    from coda_exp.data.common.errors import DataError
    from coda_exp.data.common.readers import READERS

    name, directory = cfg.task.name, cfg.data.get("dir")
    module = get_class(cfg.data._target_)
    reader = READERS.get(name)
    if directory is None:
        if getattr(module, "generated_without_dir", False):
            return None
        if reader is None:
            return None
        if reader.hub_id is None:
            return (f"no data folder ({cfg.paths.data_dir}/{name} does not exist) and {name} has no hub copy: put "
                    f"the official files there or pass data.dir=DIR. {reader.source_hint}".rstrip())
        if os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
            return (f"no data folder ({cfg.paths.data_dir}/{name} does not exist), and the hub copy "
                    f"{reader.hub_id!r} cannot be fetched offline (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE)")
        return None
    if not Path(directory).is_dir():
        return f"data.dir {directory!r} does not exist"
    if reader is not None:
        try:
            for split in reader.splits():
                reader.local_files(Path(directory), split)
        except DataError as err:
            return str(err)
    return None


def main(argv: list[str] | None = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("CODA_EXP_ROOT", str(ROOT))
    base = compose(overrides)
    problems = {}
    for task in sweep_tasks(base):
        cfg = compose([*overrides, f"task={task}"]) if task != base.task.name else base
        found = problem(cfg)
        if found:
            problems[task] = found
    if problems:
        lines = "\n".join(f"  {task}: {why}" for task, why in problems.items())
        print(f"error: the sweep cannot start, {len(problems)} task(s) lack their data (docs/data.md says where to "
              f"get each benchmark):\n{lines}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
