"""Can each task of a sweep find its data? One message for all of them before the sweep's first job, instead of every
job failing on its own with the same error: ``train.py -m`` asks it once Hydra has set up its logging
(:class:`coda_exp.hydra_callbacks.JobReport`, on the jobs the entry point composed), ``make reproduce-table-N`` before
it launches (``scripts/check_sweep_data.py``).

For each task: a ``data.dir`` that is set must be a folder holding the reader's files (the reader's own check:
``Reader.local_files``); without one, the data comes from the Hugging Face hub, which needs the reader to have a hub
copy and the hub to be reachable (not ``HF_DATASETS_OFFLINE`` / ``HF_HUB_OFFLINE``), or is generated (MLU). Tasks
whose reader it does not know are left to the run itself. It imports the data modules (and so Lightning): asked only
where Hydra's logging is set up, or outside a run."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig


def data_problem(cfg: DictConfig, splits: tuple[str, ...] | None = None) -> str | None:
    """What keeps the runs of the composed ``cfg``'s task from reading their data, or None; ``splits``: only
    these are read (an evaluation's: ``test`` covers every ``test_<name>`` split too), default every split."""
    from hydra.utils import get_class

    import coda_exp.data  # noqa: F401 (registers every family's readers)
    from coda_exp.data.common.errors import DataError, not_a_folder
    from coda_exp.data.common.readers import READERS
    from coda_exp.plugins import load

    load(cfg)  # readers of the user's own modules (``imports``) register as they are imported
    name, directory, dataset = cfg.task.name, cfg.data.get("dir"), cfg.data.get("dataset")
    module = get_class(cfg.data._target_)
    if isinstance(dataset, str) and dataset not in READERS:  # a misspelt data.dataset, or a reader not imported
        from coda_exp.node_keys import reader_problem

        return reader_problem(dataset)
    reader = READERS.get(dataset if isinstance(dataset, str) else name)  # data.dataset=<your reader> on task=snli
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
    if (problem := not_a_folder(Path(directory))) is not None:  # a file, a broken link: not "does not exist"
        expected = f": expected a folder holding {reader.layout()}. {reader.source_hint}" if reader is not None else ""
        return f"data.dir {directory!r} {problem}{expected}".rstrip()
    if reader is not None:
        try:
            for split in reader.splits():
                if splits is None or split in splits or "test" in splits and split.startswith("test_"):
                    reader.local_files(Path(directory), split)
        except DataError as err:
            return str(err)
    return None


def data_refusal(configs: list[DictConfig]) -> str | None:
    """The message refusing a sweep whose jobs' composed ``configs`` (one per task at least) include tasks that lack
    their data (:func:`data_problem`, each task and reason once), or None when every task can start."""
    problems: dict[tuple[str, str], None] = {}
    for cfg in configs:
        found = data_problem(cfg)
        if found:
            problems[str(cfg.task.name), found] = None
    if not problems:
        return None
    lines = "\n".join(f"  {task}: {why}" for task, why in problems)
    tasks = len({task for task, _ in problems})
    return (f"the sweep cannot start, {tasks} task(s) lack their data (docs/data.md says where to get each "
            f"benchmark); no job has run:\n{lines}")
