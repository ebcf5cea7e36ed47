#!/usr/bin/env python
"""CoDA Table 6 (MLU) on one GPU: {Transformer, CoDA Transformer} x seeds side by side on the fast path.

    python scripts/reproduce_table6_gpu.py [--budget-s 660] [--scale paper] [--seeds 1 2 3] [--results DIR]
    make reproduce-table-6-gpu [TABLE6_BUDGET_S=660] [SCALE=paper]     (this, then the table, curves, breakdown)

Every run is ``python train.py experiment=table_6 model=M seed=S scale=SCALE trainer=gpu_fast callbacks=gate_stats``
(the CoDA gate statistics every ``--gate-every`` steps) with its records under ``--results`` (``runs/``,
``predictions/``) and its folder ``<outputs>/<model>-s<seed>``. The runs go side by side through
``scripts/side_by_side.py`` under NVIDIA's MPS (``--mps``; the processes then share the GPU instead of taking time
slices), within ``--budget-s`` seconds: when the projected end of a run passes the budget, the least wanted run
(seed 3 before seed 2 before seed 1, CoDA before the Transformer of the same seed) is stopped and no queued run
starts, so the budget finishes whole runs rather than six partial ones.

Calling it again goes on where it stopped: a run with a record (same scale, the grid's configuration) is done and
skipped; a partial run resumes from its latest checkpoint: ``last.ckpt`` (its last validation) or
``interrupted.ckpt`` (where side_by_side's SIGTERM stopped it, ``coda_exp.stops.GracefulStop``), whichever is
at the later step (the fast path resumes at the checkpoint's global step, data order included). At the end it prints, and writes to ``<outputs>/status.json``, which runs are finished, which
are partial (and at which step), which never started and which failed (with the first error line of its log,
``<outputs>/logs/<run>.log``).

The arguments are checked before anything runs (a scale, model or trainer without its config, overrides that do not
compose): one ``error:`` line, exit status 2. Exit status 0: every run has its record; 3: the budget stopped some
runs, or a signal killed them after a checkpoint (calling again goes on: not a failure); 1: a run failed (its exit
status was not 0 and the budget did not stop it) or the side-by-side runner did.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coda_exp.auto_resume import resume_checkpoint  # a run folder's checkpoint at the later step
from coda_exp.fingerprint import fingerprint, scale_label
from coda_exp.results import load_records

MODELS = ("transformer", "coda_transformer")
QUIET = ["~callbacks.progress_bar", "+trainer.enable_progress_bar=false"]


def finished_runs(results: Path, scale: str, extra: list[str]) -> dict[tuple[str, int], dict]:
    """(model, seed) -> the newest finished MLU record whose scale label and fingerprint are those this script's
    runs get (``scale`` and the ``extra`` overrides: a budget override changes the label, a configuration
    change the fingerprint)."""
    out: dict[tuple[str, int], dict] = {}
    folder = results / "runs"
    if not folder.is_dir():
        return out
    label, print_ = scale_label(scale, extra), fingerprint(extra)
    for rec in load_records(folder):
        if (rec["task"] == "mlu" and rec["scale"] == label and rec.get("status", "finished") == "finished"
                and rec.get("fingerprint") == print_):
            key = (rec["model"], int(rec["seed"]))
            if key not in out or rec["created"] > out[key]["created"]:
                out[key] = rec
    return out


def overrides(args, model: str, seed: int) -> list[str]:
    """The train.py overrides of the run of ``model`` and ``seed`` (its folder and checkpoint aside)."""
    return ["experiment=table_6", f"model={model}", f"seed={seed}", f"scale={args.scale}", f"trainer={args.trainer}",
            "callbacks=gate_stats", f"callbacks.gate_stats.every_n_steps={args.gate_every}",
            f"paths.results_dir={args.results}", *QUIET, *args.extra]


def config_options(group: str) -> list[str]:
    from coda_exp.environment import config_dir

    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def argument_problem(args) -> str | None:
    """What is wrong with the arguments, naming the argument and what it takes, or None: checked before any run
    starts (or any partial folder is touched), so that a typo is one line instead of every run failing."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from coda_exp import resolvers  # noqa: F401 (registers the configs' resolvers)
    from coda_exp.config_checks import composition_error
    from coda_exp.environment import config_dir

    for flag, values, group in (("--scale", [args.scale], "scale"), ("--models", args.models, "model"),
                                ("--trainer", [args.trainer], "trainer")):
        wrong = [v for v in values if v not in config_options(group)]
        if wrong:
            return f"{flag} {' '.join(wrong)}: expected one of: {', '.join(config_options(group))} (configs/{group}/)"
    for flag, value, low in (("--budget-s", args.budget_s, 1e-9), ("--tail-s", args.tail_s, 0),
                             ("--gate-every", args.gate_every, 1), ("--steps", args.steps, 1)):
        if value is not None and value < low:
            return f"{flag} {value:g}: expected a number {'> 0' if low == 1e-9 else f'>= {low}'}"
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
            for model in args.models:
                compose("train", return_hydra_config=True, overrides=overrides(args, model, args.seeds[0]))
    except (ConfigCompositionException, OverrideParseException) as err:
        given = f" (the train.py overrides after --: {' '.join(args.extra)})" if args.extra else ""
        return f"the runs' config does not compose{given}: {composition_error(err)}"
    finally:
        GlobalHydra.instance().clear()
    return None


def plan(args) -> tuple[list[dict], dict[str, dict]]:
    """The side_by_side jobs still to run, in priority order, and every run's state before this call."""
    done = finished_runs(args.results, args.scale, args.extra)
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
                if folder.exists():  # started but never checkpointed: nothing to keep
                    shutil.rmtree(folder)
                argv.append(f"hydra.run.dir={folder}")
                status[name] = {"state": "queued"}
            jobs.append({"name": name, "argv": argv, "steps": args.steps,
                         "progress": f"{folder}/csv/version_*/metrics.csv"})
    return jobs, status


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
    """The line of a failed run's log that says why: its first ``error:`` line (a user's mistake, train.py's one
    line; one that ends in ``:`` with the line after it), else the first exception line (a traceback's), else its
    last line."""
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
    ``ran``: side_by_side's summary of this call's jobs by name; a job it reports failed (an exit status other than
    0, not a stop of its own) is failed, whatever checkpoint it left, unless a signal killed it (the machine's OOM
    killer, a kill -9) after a checkpoint: that one is partial, resumed by the next call as a stopped one."""
    done = finished_runs(args.results, args.scale, args.extra)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-s", type=float, default=660.0, help="wall-clock seconds for the runs (tests "
                        "included: each run keeps --tail-s for its final validation and test)")
    parser.add_argument("--tail-s", type=float, default=60.0)
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--steps", type=int, default=None, help="training steps of a run (default: the scale's: "
                        "100000 at paper scale); only tells side_by_side how far a run has to go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--trainer", default="gpu_fast")
    parser.add_argument("--gate-every", type=int, default=1000, help="steps between CoDA gate measurements")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "table_6_gpu")
    parser.add_argument("--outputs", type=Path, default=ROOT / "outputs" / "table_6_gpu")
    parser.add_argument("--mps", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--list", action="store_true", help="print the jobs and run nothing")
    parser.add_argument("extra", nargs="*", help="more train.py overrides for every run (e.g. trainer.accelerator=cpu)")
    args = parser.parse_args(argv)
    t0 = time.time()  # the budget counts from here: MPS's start and the plan come out of it
    args.results, args.outputs = args.results.resolve(), args.outputs.resolve()
    wrong = argument_problem(args)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    if args.steps is None:
        args.steps = {"paper": 100_000, "cpu": 2500, "fixture": 20}.get(args.scale, 100_000)
    jobs, before = plan(args)
    if args.list:
        print(json.dumps(jobs, indent=1))
        return 0
    (args.results / "runs").mkdir(parents=True, exist_ok=True)  # the tables read it even when no run finished
    ran, runner_failed = {}, False
    if jobs:
        args.outputs.mkdir(parents=True, exist_ok=True)
        job_file, summary = args.outputs / "jobs.json", args.outputs / "logs" / "summary.json"
        job_file.write_text(json.dumps(jobs, indent=1))
        summary.unlink(missing_ok=True)  # an earlier call's: only this call's jobs count
        mps = start_mps(args.python) if args.mps else None
        try:
            runner = subprocess.run([args.python, str(ROOT / "scripts" / "side_by_side.py"), "--jobs", str(job_file),
                                     "--budget-s", str(max(0.0, args.budget_s - (time.time() - t0))),
                                     "--logs", str(args.outputs / "logs"), "--tail-s", str(args.tail_s),
                                     "--max-parallel", str(len(jobs))], check=False)
        finally:
            stop_mps(mps)
        if summary.is_file():
            ran = {row["name"]: row for row in json.loads(summary.read_text())}
        else:  # it never got to its summary (a crash, a bad argument): its output above says why
            runner_failed = True
            print(f"error: scripts/side_by_side.py stopped (exit {runner.returncode}) without its summary "
                  f"({summary})", file=sys.stderr)
    else:
        print("every run of the grid has its record: nothing to run")
    status = report(args, before, ran)
    if runner_failed or any(s["state"] == "failed" for s in status.values()):
        return 1
    return 0 if all(s["state"] == "finished" for s in status.values()) else 3


if __name__ == "__main__":
    sys.exit(main())
