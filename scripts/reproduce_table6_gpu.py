#!/usr/bin/env python
"""CoDA Table 6 (MLU) on one GPU: {Transformer, CoDA Transformer} x seeds side by side on the fast path.

    python scripts/reproduce_table6_gpu.py [--budget-s 660] [--scale paper] [--seeds 1 2 3] [--results DIR]
    make reproduce-table-6-gpu [TABLE6_BUDGET_S=660] [SCALE=paper]     (this, then the table, curves, breakdown)

Every run is ``python train.py experiment=table_6 model=M seed=S scale=SCALE trainer=gpu_fast callbacks=gate_stats``
(gate statistics every ``--gate-every`` steps), its records under ``--results``, its folder ``<outputs>/<model>-s<seed>``.
The runs start together under NVIDIA's MPS (``--mps``: they share the GPU), run by ``scripts/side_by_side.py``'s loop
(``side_by_side.supervise``, all jobs at once), and each has ended ``--budget-s`` seconds after the call started: a
run projected past the budget stops the least wanted one (seed 3 before 2 before 1, CoDA before the Transformer of
the same seed), so the budget finishes whole runs; ``--tail-s`` before the end, the runs still training get SIGTERM
together and stop with a checkpoint (a run past its last step goes on with its test); at the end any run left is
killed; a signal to the call (Ctrl-C, SIGTERM, SIGHUP) stops them all the same way at once.
Called again it goes on: a run with a record of its configuration and data is skipped (the record's fingerprint is
the run's, and its scale the label the run records: the scale, a budget override, and what the data read adds, e.g.
``paper (data.num_train=100000)`` for MLU files of another size, ``coda_exp.fingerprint.amend_scale``), a partial run
resumes from ``last.ckpt`` or ``interrupted.ckpt`` (``coda_exp.stops.GracefulStop``), whichever is at the later step, and the
folder of a run that never checkpointed is kept as ``<folder>.incomplete-<time>`` (a line says so) for a fresh start.
It prints, and writes to ``<outputs>/status.json``, which runs are finished, partial (at which step), not started or
failed (with the first error line of ``<outputs>/logs/<run>.log``). ``--list`` prints the jobs and changes nothing.

A bad argument (a scale, model or trainer without its config, overrides that do not compose, a run folder a live
process holds) is one ``error:`` line before anything runs, exit status 2. Exit status 0: every run has its record;
3: the budget stopped some runs, or a signal killed them after a checkpoint (calling again goes on); 1: a run failed
(its exit status was not 0 and the budget did not stop it); 128 + N: signal N stopped this call (and its runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import side_by_side  # the loop that runs the jobs within the budget (supervise) and their summary

from coda_exp.auto_resume import resume_checkpoint  # a run folder's checkpoint at the later step
from coda_exp.environment import root_dir
from coda_exp.errors import UserError
from coda_exp.fingerprint import amend_scale, fingerprint, scale_label, without_defaults
from coda_exp.results import load_records
from coda_exp.run_folder import live_owner

MODELS = ("transformer", "coda_transformer")
QUIET = ["~callbacks.progress_bar", "+trainer.enable_progress_bar=false"]


def finished_runs(args) -> dict[tuple[str, int], dict]:
    """(model, seed) -> the newest finished MLU record of the run this call makes: its fingerprint that of the
    ``extra`` overrides (a configuration change changes it), its scale the label the run records (:func:`run_labels`:
    a budget override changes it, so do data files of another size or other examples). The data is looked at only
    where a record could be such a run's (a first call reads no file)."""
    out: dict[tuple[str, int], dict] = {}
    folder = args.results / "runs"
    if not folder.is_dir():
        return out
    candidates = []
    for rec in load_records(folder):
        defaults = rec.get("fingerprint_defaults")  # extra's overrides the run found its configuration's defaults
        print_ = fingerprint(without_defaults(args.extra, defaults if isinstance(defaults, list) else None))
        if (rec["task"] == "mlu" and rec.get("status", "finished") == "finished" and rec.get("fingerprint") == print_
                and rec["model"] in args.models):
            candidates.append(rec)
    labels = run_labels(args) if candidates else {}
    for rec in candidates:
        if rec["scale"] == labels[rec["model"]]:
            key = (rec["model"], int(rec["seed"]))
            if key not in out or rec["created"] > out[key]["created"]:
                out[key] = rec
    return out


def run_labels(args) -> dict[str, str]:
    """model -> the ``scale`` label its runs record, as the pipeline writes it: ``fingerprint.scale_label`` of the
    scale and the ``extra`` overrides, amended (``fingerprint.amend_scale``) by what the data module says of the data
    it reads (``scale_notes``: MLU files of another size than the scale's, ``paper (data.num_train=100000)``, or of
    other examples, ``data.files=<digest>``; nothing for generated data). Worked out once per call (the files read
    once, whatever the models and seeds) and kept in ``args.labels``."""
    if getattr(args, "labels", None) is None:
        plain, notes = scale_label(args.scale, args.extra), {}
        args.labels = {model: amend_scale(plain, data_notes(cfg, notes)) for model, cfg in composed(args).items()}
    return args.labels


def data_notes(cfg, seen: dict[str, list[str]]) -> list[str]:
    """The data module's notes on the data the run of ``cfg`` (a composed train config) reads: its ``files_notes``
    (MLU: the files read, not encoded), else ``setup`` then ``scale_notes`` as in a run (``coda_exp.pipeline``);
    ``seen``: the notes of each data configuration already read (every model reads the same files)."""
    from omegaconf import OmegaConf

    with run_environment():
        data = OmegaConf.to_container(cfg.data, resolve=True)
        if data.get("dir") is None:  # generated: no file read, nothing to say
            return []
        key = json.dumps(data, sort_keys=True, default=str)
        if key not in seen:
            from coda_exp.pipeline import build_data

            datamodule = build_data(cfg)
            if hasattr(datamodule, "files_notes"):
                seen[key] = datamodule.files_notes()
            else:
                datamodule.setup("fit")
                seen[key] = datamodule.scale_notes()
    return seen[key]


@contextlib.contextmanager
def run_environment():
    """``CODA_EXP_ROOT`` as train.py sets it for the runs (``coda_exp.environment.set_environment``: the same
    folder), while their config is resolved here (``paths.data_dir``: a ``data/mlu/`` the runs read); then as it was."""
    saved = os.environ.get("CODA_EXP_ROOT")
    os.environ["CODA_EXP_ROOT"] = saved or str(root_dir().absolute())
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CODA_EXP_ROOT", None)


def overrides(args, model: str, seed: int) -> list[str]:
    """The train.py overrides of the run of ``model`` and ``seed`` (its folder and checkpoint aside)."""
    return ["experiment=table_6", f"model={model}", f"seed={seed}", f"scale={args.scale}", f"trainer={args.trainer}",
            "callbacks=gate_stats", f"callbacks.gate_stats.every_n_steps={args.gate_every}",
            f"paths.results_dir={args.results}", *QUIET, *args.extra]


def config_options(group: str) -> list[str]:
    from coda_exp.environment import config_dir

    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def composed(args) -> dict:
    """Each model's ``train.py`` config of this call's runs (its first seed's, with Hydra's section), composed once
    per call and kept in ``args.composed``; Hydra's errors where the overrides do not compose."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from coda_exp import resolvers  # noqa: F401 (registers the configs' resolvers)
    from coda_exp.environment import config_dir

    if getattr(args, "composed", None) is None:
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
                args.composed = {model: compose("train", return_hydra_config=True,
                                                overrides=overrides(args, model, args.seeds[0]))
                                 for model in args.models}
        finally:
            GlobalHydra.instance().clear()
    return args.composed


def argument_problem(args) -> str | None:
    """What is wrong with the arguments, naming the argument and what it takes, or None: checked before any run
    starts (or any partial folder is touched), so that a typo is one line instead of every run failing."""
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from coda_exp.config_checks import composition_error

    for flag, values, group in (("--scale", [args.scale], "scale"), ("--models", args.models, "model"),
                                ("--trainer", [args.trainer], "trainer")):
        wrong = [v for v in values if v not in config_options(group)]
        if wrong:
            return f"{flag} {' '.join(wrong)}: expected one of: {', '.join(config_options(group))} (configs/{group}/)"
    for flag, value, low in (("--budget-s", args.budget_s, 1e-9), ("--tail-s", args.tail_s, 0),
                             ("--gate-every", args.gate_every, 1), ("--steps", args.steps, 1)):
        if value is not None and value < low:
            return f"{flag} {value:g}: expected a number {'> 0' if low == 1e-9 else f'>= {low}'}"
    if args.tail_s >= args.budget_s:
        return f"--tail-s {args.tail_s:g}: expected less than --budget-s ({args.budget_s:g}): no run could start"
    try:
        composed(args)
    except (ConfigCompositionException, OverrideParseException) as err:
        given = f" (the train.py overrides after --: {' '.join(args.extra)})" if args.extra else ""
        return f"the runs' config does not compose{given}: {composition_error(err)}"
    return None


def plan(args) -> tuple[list[dict], dict[str, dict]]:
    """The side_by_side jobs still to run, in priority order, and every run's state before this call (a fresh run
    whose folder exists: its ``existing`` folder, which :func:`keep_aside` moves). Reads only: ``--list`` too."""
    done = finished_runs(args)
    jobs, status = [], {}
    for seed in args.seeds:  # priority: seed 1 first, each seed's Transformer before its CoDA Transformer
        for model in args.models:
            name = f"{model}-s{seed}"
            folder = args.outputs / name
            if (model, seed) in done:
                status[name] = {"state": "finished", "record": done[(model, seed)]["run_id"]}
                continue
            resume = resume_checkpoint(folder)
            argv = [args.python, str(ROOT / "train.py"), *overrides(args, model, seed)]
            if resume is not None:  # a partial run: resume in its own folder (Hydra's folder for this call beside it)
                argv += [f"ckpt_path={resume[0]}", f"hydra.run.dir={folder}.resume-{time.strftime('%Y%m%d-%H%M%S')}"]
                status[name] = {"state": "resuming", "from": str(resume[0]), "step": resume[1]}
            else:
                argv.append(f"hydra.run.dir={folder}")
                status[name] = {"state": "queued", **({"existing": str(folder)} if folder.is_dir() and any(folder.iterdir()) else {})}
            jobs.append({"name": name, "argv": argv, "steps": args.steps,
                         "progress": f"{folder}/csv/version_*/metrics.csv"})
    return jobs, status


def held(args, jobs: list[dict]) -> str | None:
    """A job's run folder that a live process holds (its ``.run_owner``: a run still going, of another call of this
    script, say), as an error; None where none is: a held folder is neither moved nor run in again."""
    for folder in (args.outputs / job["name"] for job in jobs):
        if owner := live_owner(folder):
            return (f"{folder} is in use by process {owner['pid']} (a run still going: another call of this script?); "
                    "wait for it to end or stop it, then call again")
    return None


def keep_aside(before: dict[str, dict]) -> None:
    """A fresh run's folder that holds files (a run stopped before its first checkpoint: its log, its config, maybe
    a few steps) is kept as ``<folder>.incomplete-<time>``, never deleted, one line each (an empty one is used)."""
    for name, folder in ((n, Path(s["existing"])) for n, s in before.items() if "existing" in s):
        folder.rename(aside := folder.with_name(f"{folder.name}.incomplete-{datetime.now():%Y%m%d-%H%M%S.%f}"))
        print(f"{name}: its folder had no checkpoint: kept as {aside}; the run starts afresh")


def start_mps(python: str) -> dict | None:
    """Start NVIDIA's MPS daemon and check a CUDA process runs under it; the environment to stop it, or None."""
    if shutil.which("nvidia-cuda-mps-control") is None:
        print("MPS: nvidia-cuda-mps-control not found; the runs time-slice the GPU")
        return None
    env = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps-pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/mps-log"}
    for path in env.values():
        os.makedirs(path, exist_ok=True)
    os.environ.update(env)
    check = [python, "-c", "import torch; assert torch.ones(2, device='cuda').sum().item() == 2"]
    try:  # a machine whose MPS cannot serve (a sandboxed GPU, say) can hang the first CUDA client: bounded
        if (subprocess.run(["nvidia-cuda-mps-control", "-d"], check=False, timeout=20).returncode == 0
                and subprocess.run(check, timeout=45, check=False).returncode == 0):
            print("MPS: on")
            return env
    except subprocess.TimeoutExpired:
        print("MPS: its check timed out")
    stop_mps(env)
    print("MPS: could not start; the runs time-slice the GPU")
    return None


def stop_mps(env: dict | None) -> None:
    if env is None:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", check=False, timeout=20)
    time.sleep(2)
    for key in env:
        os.environ.pop(key, None)


def first_error(log: Path) -> str:
    """The line of a failed run's log that says why: its first ``error:`` line (train.py's one line; one ending in
    ``:`` with the line after it), else the first exception line (a traceback's), else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return f"no log ({log})"
    for pattern in (r"^error:", r"^[\w.]+(Error|Exception|Interrupt)\b(:|$)"):
        at = next((n for n, line in enumerate(lines) if re.match(pattern, line)), None)
        if at is not None:
            return " ".join(lines[at:at + 2]) if lines[at].endswith(":") and at + 1 < len(lines) else lines[at]
    return lines[-1] if lines else "(its log is empty)"


def killed(job: dict) -> bool:
    """Whether side_by_side's summary row says a signal ended the job (a negative exit status), not the job itself."""
    return isinstance(job.get("returncode"), int) and job["returncode"] < 0 and not job["state"].startswith("stopped")


def report(args, before: dict[str, dict], ran: dict[str, dict] | None = None) -> dict[str, dict]:
    """Each run's state after this call (finished / failed / partial at step k / not started), printed and saved.
    ``ran``: the summary rows of this call's jobs by name; a job failed (an exit status other than 0, not a stop of
    ours) is failed, whatever checkpoint it left, unless a signal killed it (the OOM killer, a kill -9) after a
    checkpoint: that one is partial, resumed by the next call as a stopped one."""
    done = finished_runs(args)
    status = {}
    for seed in args.seeds:
        for model in args.models:
            name = f"{model}-s{seed}"
            resume = resume_checkpoint(args.outputs / name)
            job = (ran or {}).get(name, {})
            if (model, seed) in done:
                rec = done[(model, seed)]
                status[name] = {"state": "finished", "record": rec["run_id"],
                                "test/acc_seq": rec["metrics"].get("test/acc_seq")}
            elif str(job.get("state", "")).startswith("failed") and not (killed(job) and resume is not None):
                status[name] = {"state": "failed", "exit": job.get("returncode"),
                                "error": first_error(args.outputs / "logs" / f"{name}.log")}
            elif resume is not None:
                status[name] = {"state": "partial", "step": resume[1], "resume": str(resume[0])}
                if killed(job):
                    status[name]["killed"] = f"signal {-job['returncode']}"
            else:
                status[name] = {"state": "not started"}
            status[name]["before"] = before.get(name, {}).get("state")
    args.outputs.mkdir(parents=True, exist_ok=True)
    (args.outputs / "status.json").write_text(json.dumps(status, indent=1))
    failed = [n for n, s in status.items() if s["state"] == "failed"]
    missing = [n for n, s in status.items() if s["state"] not in ("finished", "failed")]
    for name, s in status.items():
        print(f"  {name:24s} {s['state']}" + (f" at step {s['step']} of {args.steps}" if "step" in s else "")
              + (f" (exit {s['exit']}): {s['error']}" if s["state"] == "failed" else ""))
    if failed:
        print(f"error: {len(failed)} of {len(status)} runs failed (their logs: {args.outputs / 'logs'}/<run>.log); "
              f"fix what they report, then call again", file=sys.stderr)
    elif missing:
        print(f"missing {len(missing)} of {len(status)} runs: call again (`make reproduce-table-6-gpu`) to go on; "
              f"partial runs resume from their latest checkpoint")
    return status


def supervise(specs: list[dict], logs: Path, t0: float, budget_s: float, tail_s: float) -> tuple[list[dict], int]:
    """side_by_side's loop (:func:`side_by_side.supervise`) over the jobs ``specs``, all at once, each ended by
    ``t0 + budget_s`` (``tail_s`` before it, the runs still training stop together): their summary rows and 128 + the
    signal that stopped this call (0: none)."""
    jobs = side_by_side.make_jobs(specs, "the plan")
    signalled = side_by_side.supervise(jobs, logs, t0, budget_s, max_parallel=len(jobs), tail_s=tail_s)
    return side_by_side.summary(jobs), signalled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-s", type=float, default=660.0, help="seconds from this call's start (MPS's start "
                        "included, the report after the runs not) by which every run has ended: at --budget-s minus "
                        "--tail-s the runs still training get SIGTERM, all at once, and stop at the end of their step "
                        "with a checkpoint; a run past its last step goes on (its test); any run left is then killed")
    parser.add_argument("--tail-s", type=float, default=60.0, help="the end of the budget kept for the runs' final "
                        "validation and test, and for the others' stop (their checkpoint); less than --budget-s")
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--steps", type=int, default=None, help="training steps of a run (default: the scale's: "
                        "100000 at paper scale); only tells side_by_side how far a run has to go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--trainer", default="gpu_fast")
    parser.add_argument("--gate-every", type=int, default=1000, help="steps between CoDA gate measurements")
    parser.add_argument("--results", type=Path, help="default: <root>/results/table_6_gpu, where <root> is "
                        "$CODA_EXP_ROOT, else the checkout when called inside it, else the current folder")
    parser.add_argument("--outputs", type=Path, help="default: <root>/outputs/table_6_gpu")
    parser.add_argument("--mps", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--list", action="store_true", help="print the jobs; run, move and delete nothing")
    parser.add_argument("extra", nargs="*", help="more train.py overrides for every run (e.g. trainer.accelerator=cpu)")
    args = parser.parse_args(argv)
    t0 = time.time()  # the budget counts from here: MPS's start and the plan come out of it
    args.results = (args.results or root_dir() / "results" / "table_6_gpu").resolve()
    args.outputs = (args.outputs or root_dir() / "outputs" / "table_6_gpu").resolve()
    wrong = argument_problem(args)
    args.steps = args.steps or {"paper": 100_000, "cpu": 2500, "fixture": 20}.get(args.scale, 100_000)
    try:
        jobs, before = ([], {}) if wrong else plan(args)
    except UserError as err:  # the runs' data cannot be read (data.dir without MLU files): one line, nothing run
        jobs, before, wrong = [], {}, str(err)
    if wrong := wrong or (None if args.list else held(args, jobs)):
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    if args.list:
        print(json.dumps(jobs, indent=1))
        return 0
    keep_aside(before)
    (args.results / "runs").mkdir(parents=True, exist_ok=True)  # the tables read it even when no run finished
    ran, signalled = {}, 0
    if jobs:
        (logs := args.outputs / "logs").mkdir(parents=True, exist_ok=True)
        mps = start_mps(args.python) if args.mps else None
        try:
            rows, signalled = supervise(jobs, logs, t0, args.budget_s, args.tail_s)
        finally:
            stop_mps(mps)
        (logs / "summary.json").write_text(json.dumps(rows, indent=1))
        ran = {row["name"]: row for row in rows}
    else:
        print("every run of the grid has its record: nothing to run")
    status = report(args, before, ran)
    if signalled or any(s["state"] == "failed" for s in status.values()):
        return signalled or 1
    return 0 if all(s["state"] == "finished" for s in status.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
