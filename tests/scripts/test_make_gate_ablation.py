"""`make mlu-gate-ablation[-10k]`: what they run, read off `make -n` (no training)."""

import shlex
import shutil
import subprocess

import pytest

from tests import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str, *args: str) -> list[list[str]]:
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", target, *args], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [shlex.split(line) for line in out.splitlines() if ".py" in line]


def train_args(lines: list[list[str]]) -> list[str]:
    (line,) = [x for x in lines if "train.py" in x[1]]
    return line[2:]


def test_the_study_runs_at_the_cpu_recipe_into_its_own_folder_whatever_scale_says():
    lines = dry_run("mlu-gate-ablation")
    args = train_args(lines)
    # SCALE (reproduce-%'s, paper by default) must not leak in: the study is at the CPU recipe
    assert "experiment=mlu_gate_ablation" in args and "scale=cpu" in args
    assert "paths.results_dir=results/mlu_gate_ablation" in args and not any("max_steps" in a for a in args)
    outs = [x[x.index("--out") + 1] for x in lines if "--out" in x]
    assert outs == ["results/mlu_gate_ablation/tables/gate_at_init.md",
                    "results/mlu_gate_ablation/tables/gate_ablation.md",
                    "results/mlu_gate_ablation/tables/by_operation.md",
                    "results/mlu_gate_ablation/figures/learning_curves.png"]
    assert "seed=2" in train_args(dry_run("mlu-gate-ablation", "RUN_ARGS=seed=2"))


def test_the_10k_study_stretches_the_recipe_and_keeps_its_records_apart(compose, tmp_path):
    lines = dry_run("mlu-gate-ablation-10k", "RUN_ARGS=trainer=gpu")
    args = train_args(lines)
    assert {"scale=cpu", "paths.results_dir=results/mlu_gate_ablation_10k", "task.max_steps=10000",
            "task.val_check_interval=500", "trainer=gpu"} <= set(args)
    assert all("results/mlu_gate_ablation_10k/" in x[x.index("--out") + 1] for x in lines if "--out" in x)
    assert all("results/mlu_gate_ablation_10k" == x[x.index("--runs") + 1] for x in lines if "--runs" in x)
    cfg = compose([a for a in args if not a.startswith(("-m", "paths.", "trainer="))] + ["model=coda_transformer"], tmp_path)
    assert cfg.task.max_steps == 10000 and cfg.scheduler.total_steps == 10000  # the cosine ends at the last step
