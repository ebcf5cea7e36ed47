"""The run's loggers (``configs/logger/``), and what a W&B run knows of the run it follows.

Every logger of ``cfg.logger`` is instantiated as configured. A W&B logger also gets:

- its mode (``logger_checks.wandb_mode``): ``logger.wandb.mode`` where set, ``online`` for
  ``logger.wandb.offline=false``, else ``WANDB_MODE`` where set, else ``offline``;
- its run id, kept in the run folder (:data:`WANDB_ID_FILE`): a run resumed with ``ckpt_path=`` continues in its
  checkpoint's folder (``coda_exp.run_folder``), finds the id there and resumes that W&B run (``id=...``,
  ``resume="allow"``) instead of starting a new one; a fresh run draws a new id and writes it;
- ``name`` (unless set): ``<task>-<model>-s<seed>[-<tag>]``, ``<tag>`` the run folder's configuration tag
  (:func:`wandb_name`);
- ``group`` (unless set): ``<experiment>-<fingerprint>-<scale>``, where ``<experiment>`` is the ``experiment=``
  config (``table_2``), else ``<task>-<model>``, ``<fingerprint>`` the configuration fingerprint
  (``coda_exp.fingerprint``) and ``<scale>`` the record's scale label (``fixture``, ``paper (task.epochs=3)``: the
  scale and the budget, which the fingerprint leaves out and tables keep apart): a learning-rate sweep lands beside
  the default runs, not among them, and smoke tests or budget-changed runs apart from paper runs; an evaluation
  (``coda-exp eval``) joins its trained run's group, its config naming the trained run (``run.trained_run_id``,
  ``run.trained_wandb_id``: :func:`trained_wandb_id`, ``run.checkpoint``), its metrics logged at the checkpoint's
  step;
- ``tags``: the configured ones, and the scale label where they lack it;
- ``job_type`` (unless set): ``train``, or ``eval`` for ``coda-exp eval``;
- as the run starts (:func:`log_config`), the resolved config and, under ``run``, the record's run id, fingerprint,
  scale label, experiment, overrides and git commit (the run record keeps the W&B run's id, project and group in
  ``wandb``: :func:`wandb_reference`);
- at the end (:func:`finish`), the run record's summary in ``wandb.run.summary``: its final metrics (the tested
  checkpoint's, under their own names), ``record/*`` (run id, status, fingerprint, scale, steps, epochs, wall time,
  mode; an evaluation's trained run id, trained W&B id and checkpoint) and ``table/<table>/<row>/<column>``, the value of each paper-table cell the record fills (in the table's
  units), found by the tables' own selection rules (:func:`table_cells`).

The tested checkpoint's validation after ``fit`` is made without the loggers (:func:`without_loggers`): the ``val/*``
curves hold the validations made during training, and its metrics go to the record and the W&B summary.

The CSV and TensorBoard loggers of a resumed run (``ckpt_path=``, ``resume=auto``) continue in the latest version
folder the run already has (``csv/version_0``), as the W&B run continues, instead of starting ``version_1`` beside it
and splitting the run's metrics (:func:`resumed_version`): the CSV logger keeps the ``metrics.csv`` rows up to the
step the run resumes from (Lightning's writer deleted the file; the later rows, of steps the resumed run trains
again, are dropped: :class:`ResumedCSVLogger`), TensorBoard hides the events from that step on (``purge_step``).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import logging
import os
import secrets
import warnings
from pathlib import Path

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment

from coda_exp.io import atomic_write_text
from coda_exp.logger_checks import is_wandb, mode_note, wandb_errors, wandb_mode

log = logging.getLogger(__name__)

WANDB_ID_FILE = "wandb_id.txt"
ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
GROUP_CHARS, TAG_CHARS = 128, 64  # the longest group and tag W&B takes
RECORD_SUMMARY = ("run_id", "status", "fingerprint", "scale", "steps", "epochs", "wall_time_s", "mode",
                  "trained_run_id", "trained_wandb_id", "checkpoint")  # (the last three: an evaluation's)


def capped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (W&B refuses longer groups and tags), ending with a digest of the whole
    where it is cut, so that two long texts stay apart."""
    if len(text) <= limit:
        return text
    return f"{text[:limit - 9]}~{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"


def wandb_group(identity: dict) -> str:
    """``<experiment or task-model>-<fingerprint>-<scale>`` of a run (``identity``: ``experiment``, ``task``,
    ``model``, ``fingerprint``, ``scale``: :func:`coda_exp.run_record.run_identity`); ``<scale>`` is the record's
    scale label (``fixture``, ``paper (task.epochs=3)``), which the fingerprint leaves out and tables keep apart."""
    base = identity.get("experiment") or f"{identity.get('task')}-{identity.get('model')}"
    scale = f"-{identity['scale']}" if identity.get("scale") else ""
    return capped(f"{base}-{identity['fingerprint']}{scale}", GROUP_CHARS)


def wandb_name(cfg: DictConfig, identity: dict | None) -> str:
    """``<task>-<model>-s<seed>[-<tag>]``: ``<tag>`` the configuration tag the run's folder carries
    (:mod:`coda_exp.run_tag`, from ``identity``'s overrides), so that the runs of an lr sweep are told apart."""
    from coda_exp.run_tag import folder_suffix

    suffix = folder_suffix(identity.get("overrides")) if identity is not None else ""
    return f"{cfg.task.name}-{cfg.model.name}-s{cfg.seed}{suffix}"


def wandb_tags(logger_cfg, identity: dict) -> list[str]:
    """The configured tags, and the run's scale label where they lack it (``fixture (task.epochs=3)`` beside
    ``fixture``, the scale's name): a filter by tag keeps smoke tests, changed budgets and paper runs apart."""
    tags = [str(t) for t in (logger_cfg.get("tags") or [])]
    label = capped(str(identity.get("scale") or ""), TAG_CHARS)
    return tags + [label] if label and label not in tags else tags


def wandb_run_id(folder: Path, resume: bool) -> str:
    """The W&B run id of the run in ``folder``: the one kept there when ``resume``, else a new one (written there)."""
    path = folder / WANDB_ID_FILE
    if resume and path.is_file():
        kept = path.read_text(encoding="utf-8").strip()
        if kept:
            return kept
    new = "".join(secrets.choice(ID_ALPHABET) for _ in range(8))  # as W&B draws its own ids
    if pl.utilities.rank_zero_only.rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(new + "\n", encoding="utf-8")
    return new


def trained_wandb_id(checkpoint: Path) -> str | None:
    """The W&B run id of the training run that wrote ``checkpoint``: the one its run folder keeps
    (:data:`WANDB_ID_FILE`); None outside a run folder or for a run logged without W&B."""
    from coda_exp.run_folder import resume_folder

    folder = resume_folder(checkpoint)
    path = folder / WANDB_ID_FILE if folder is not None else None
    return (path.read_text(encoding="utf-8").strip() or None) if path is not None and path.is_file() else None


def resumed_version(logger_cfg) -> int | None:
    """The latest ``version_N`` folder a logger (``save_dir``/``name``) already has, None where it has none."""
    save_dir = logger_cfg.get("save_dir")
    if save_dir is None:
        return None
    root = Path(str(save_dir)) / str(logger_cfg.get("name") or "")
    numbers = [int(d.name[8:]) for d in root.glob("version_*") if d.is_dir() and d.name[8:].isdigit()]
    return max(numbers) if numbers else None


def _kept_rows(path: Path, resume_step: int) -> tuple[list[str], str]:
    """The header of ``metrics.csv`` at ``path`` and, as CSV text, its header and rows of the steps before
    ``resume_step`` (batch i logs at step i)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, rows = list(reader.fieldnames or []), list(reader)

    def step(row: dict) -> float:
        try:
            return float(row.get("step") or 0)
        except ValueError:
            return 0.0

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header)
    writer.writeheader()
    writer.writerows(r for r in rows if step(r) < resume_step)
    return header, out.getvalue()


class ResumedCSVLogger(pl.loggers.CSVLogger):
    """Lightning's CSVLogger continuing a resumed run's version folder: its ``metrics.csv`` rows before
    ``resume_step`` (those of the batches the checkpoint holds) kept, with its columns, so the resumed run's rows
    follow its earlier ones in the same file; the later rows, of steps the resumed run trains again, are dropped.

    Lightning's writer (``ExperimentWriter``) deletes the file it finds. Through public names only (the logger's
    ``experiment`` and ``log_dir``, the writer's ``metrics_file_path`` and ``metrics_keys``): the file is moved
    aside to ``metrics.csv.resumed`` first, so the writer finds none to delete, then the kept rows are written
    whole as ``metrics.csv`` and the writer told its columns; the file aside goes last. A process killed in between
    leaves the rows in one of the two files, and the next resumed run reads them from there: nothing computed is
    lost. (This used to override the writer's private ``_check_log_dir_exists``, which a Lightning upgrade could
    rename without a word.)"""

    ASIDE = ".resumed"  # the suffix of metrics.csv while the writer is made

    def __init__(self, *args, resume_step: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step
        self.continued = False  # the kept rows are back in metrics.csv

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self.continued:
            return super().experiment
        path = Path(self.log_dir) / ExperimentWriter.NAME_METRICS_FILE
        aside = path.with_name(path.name + self.ASIDE)
        if path.is_file():  # (else a killed earlier attempt left the rows aside)
            os.replace(path, aside)
        with warnings.catch_warnings():  # "... exists and is not empty. Previous log files ... will be deleted"
            warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
            writer = super().experiment
        if aside.is_file():
            header, text = _kept_rows(aside, self.resume_step)
            atomic_write_text(writer.metrics_file_path, text)
            writer.metrics_keys = header  # the writer's save() appends under these columns
            aside.unlink()
        self.continued = True
        return writer


def _resumed(c, cfg: DictConfig) -> tuple[object, dict]:
    """A CSV or TensorBoard logger config ``c`` of a resumed run, and its extra arguments: the latest version it
    has, and what keeps its metrics up to the checkpoint's step (module docstring); ``c`` unchanged, {} otherwise."""
    target = str(c.get("_target_", ""))
    kind = "csv" if target.endswith(".CSVLogger") else "tb" if target.endswith(".TensorBoardLogger") else None
    version = resumed_version(c) if kind and c.get("version") is None else None
    if version is None:
        return c, {}
    from coda_exp.checkpoint_avg import CheckpointError, global_step

    try:
        step = global_step(cfg.ckpt_path)
    except CheckpointError:  # the run's checks name it; no step: a new version, as before
        return c, {}
    if kind == "tb":
        return c, {"version": version, "purge_step": step}  # the resumed run logs from step `step` on
    node = OmegaConf.to_container(c, resolve=True)  # its paths resolved where it lies in the run's config
    node["_target_"] = f"{__name__}.ResumedCSVLogger"
    return OmegaConf.create(node), {"version": version, "resume_step": step}


def build_loggers(cfg: DictConfig, identity: dict | None = None, job_type: str = "train") -> list:
    """The loggers of ``cfg.logger``; a W&B one with its id, group and job type (module docstring).
    ``identity``: the run's (``coda_exp.run_record.run_identity``); None: no group is derived."""
    out = []
    for c in (cfg.get("logger") or {}).values():
        if c is None:
            continue
        extra = {}
        if cfg.get("ckpt_path") and job_type == "train":  # a resumed run: its CSV / TensorBoard version goes on
            c, extra = _resumed(c, cfg)
        if is_wandb(c):
            # the mode is ours to choose (logger_checks.wandb_mode: the config's, else WANDB_MODE, else offline),
            # passed explicitly; Lightning is told offline=False, else it sets WANDB_MODE=dryrun for the process
            # (and a later job of a sweep)
            extra["mode"], extra["offline"] = wandb_mode(c), False
            if (note := mode_note(c, extra["mode"])) is not None:
                log.warning("%s", note)
            if c.get("id") is None and c.get("version") is None:
                resume = bool(cfg.get("ckpt_path")) and job_type == "train"
                extra["id"] = wandb_run_id(Path(cfg.paths.output_dir), resume)
            if c.get("name") is None:
                extra["name"] = wandb_name(cfg, identity)
            if c.get("group") is None and identity is not None:
                extra["group"] = wandb_group(identity)
            if identity is not None:
                extra["tags"] = wandb_tags(c, identity)
            if c.get("job_type") is None:
                extra["job_type"] = job_type
        logger = instantiate(c, **extra)
        if is_wandb(c) and getattr(logger, "_wandb_init", {}).get("anonymous", False) is None:
            # Lightning passes anonymous=None unless asked, and wandb warns of any value ("The anonymous setting has
            # no effect...") on every run: left out, wandb's own default; logger.wandb.anonymous=true still passes
            del logger._wandb_init["anonymous"]
        out.append(logger)
    return out


def run_fields(identity: dict, commit: str | None) -> dict:
    """What identifies a run beside its resolved config, in each logger's config under ``run``: the record's
    ``run_id``, ``fingerprint``, ``scale`` (label), ``experiment``, ``overrides`` (its command line's) and
    ``git_commit`` (``identity``: :func:`coda_exp.run_record.run_identity`)."""
    keys = ("run_id", "fingerprint", "scale", "experiment")
    return {**{k: identity.get(k) for k in keys}, "overrides": [str(o) for o in identity.get("overrides") or []],
            "git_commit": commit}


def log_config(loggers: list, cfg: DictConfig, identity: dict, commit: str | None, **more) -> None:
    """Each logger's config as the run starts (W&B: before anything is logged, so that the part of a run that crashed
    or was stopped has it too): the resolved config, and under ``run`` :func:`run_fields` and ``more`` (an
    evaluation's trained run and checkpoint)."""
    params = {**OmegaConf.to_container(cfg, resolve=True), "run": {**run_fields(identity, commit), **more}}
    with wandb_errors():  # the W&B run starts here: its error is one message (coda_exp.logger_checks)
        for lg in loggers:
            lg.log_hyperparams(params)


def wandb_reference(loggers: list) -> dict | None:
    """The W&B run of ``loggers`` as a record keeps it (``wandb``: ``id``, ``project``, ``entity``, ``group``,
    ``mode``, ``url``: online only), so that a table cell's record leads to its dashboard; None without W&B (and off
    rank 0, whose logger holds no run)."""
    found = [lg for lg in loggers if type(lg).__name__ == "WandbLogger"]
    if not found or pl.utilities.rank_zero_only.rank != 0:
        return None
    run = found[0].experiment
    offline = bool(getattr(run, "offline", False))
    return {"id": str(run.id), "project": getattr(run, "project", None) or None,
            "entity": getattr(run, "entity", None) or None, "group": getattr(run, "group", None) or None,
            "mode": "offline" if offline else str(getattr(run.settings, "mode", "online")),
            "url": None if offline else getattr(run, "url", None)}


@contextlib.contextmanager
def without_loggers(trainer: pl.Trainer):
    """``trainer`` without its loggers for a while: the final validation of the tested checkpoint after ``fit``, whose
    metrics go to the run record and the W&B summary (:func:`finish`), not into the ``val/*`` curves at the last step
    (they hold the validations made during training, as the record's ``val_curve``)."""
    kept = list(trainer.loggers)
    trainer.loggers = []
    try:
        yield
    finally:
        trainer.loggers = kept


def table_cells(record: dict, spec_dir: Path | None = None) -> dict[str, float]:
    """``{"table/<id>/<row>/<column>": value}``: each cell of the paper tables (``configs/tables``) this record
    would fill, in the table's units (percent columns x 100): its task, metric and match, the table's grid fingerprint,
    not diverged."""
    from coda_exp.environment import config_dir
    from coda_exp.experiments import grid_fingerprint
    from coda_exp.tables import find_specs, load_table_spec, record_fingerprint, record_matches

    if record.get("status", "finished") == "diverged":
        return {}
    cells, fingerprint = {}, record_fingerprint(record)
    for path in find_specs(spec_dir or config_dir() / "tables"):
        spec = load_table_spec(path)
        if fingerprint != grid_fingerprint(spec.id):  # another configuration than the table's grid
            continue
        for row in spec.rows:
            if row.match is None:
                continue
            for col in spec.columns:
                metric = col.metric_for(row.split)
                if record_matches(record, col.task, metric, {**row.match, **col.match}):
                    value = float(record["metrics"][metric])
                    cells[f"table/{spec.id}/{row.name}/{col.name}"] = 100.0 * value if col.percent else value
    return cells


def record_summary(record: dict) -> dict:
    """What :func:`finish` writes into ``wandb.run.summary`` (module docstring)."""
    summary = {k: float(v) for k, v in record.get("metrics", {}).items()}
    summary.update({f"record/{k}": record[k] for k in RECORD_SUMMARY if record.get(k) is not None})
    try:
        summary.update(table_cells(record))
    except (OSError, ValueError) as err:  # a table spec that does not load must not lose the run's summary
        log.warning("W&B summary: table cells not computed (%s)", err)
    return summary


def finish(loggers: list, record: dict | None = None, exit_code: int = 0) -> None:
    """End the W&B run, with ``record``'s summary first (module docstring); nothing without a W&B logger.
    ``exit_code``: the run's exit status; not 0 marks the W&B run failed (a crash, or a signal's stop that a
    resumed run continues in the same W&B run), where 0 would show it finished."""
    wandb_loggers = [lg for lg in loggers if type(lg).__name__ == "WandbLogger"]
    if not wandb_loggers:
        return
    import wandb

    if record is not None and pl.utilities.rank_zero_only.rank == 0:
        for lg in wandb_loggers:
            lg.experiment.summary.update(record_summary(record))
    wandb.finish(exit_code=exit_code)  # so that the next job of a sweep starts a fresh W&B run

