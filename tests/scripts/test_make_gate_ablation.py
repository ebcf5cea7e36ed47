"""`make mlu-gate-ablation[-10k]`: what they run, read off `make -n` (no training)."""

import json
import os
import shlex
import shutil
import subprocess
import sys

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


def test_a_fixture_study_stays_out_of_the_tracked_results():
    """ABLATION_SCALE=fixture (a smoke run of the study) writes under outputs/fixture_results/, as scale=fixture
    does, never into the committed results/mlu_gate_ablation*/; so does reproduce-table-6-gpu SCALE=fixture."""
    for target, folder in (("mlu-gate-ablation", "mlu_gate_ablation"), ("mlu-gate-ablation-10k", "mlu_gate_ablation_10k")):
        lines = dry_run(target, "ABLATION_SCALE=fixture")
        assert {"scale=fixture", f"paths.results_dir=outputs/fixture_results/{folder}"} <= set(train_args(lines))
        outs = [x[x.index("--out") + 1] for x in lines if "--out" in x]
        assert outs and all(o.startswith(f"outputs/fixture_results/{folder}/") for o in outs), outs
    gpu = dry_run("reproduce-table-6-gpu", "SCALE=fixture")
    assert [x[x.index("--results") + 1] for x in gpu if "--results" in x] == ["outputs/fixture_results/table_6_gpu"]
    assert all(x[x.index("--out") + 1].startswith("outputs/fixture_results/table_6_gpu/") for x in gpu if "--out" in x)


def test_the_10k_study_stretches_the_recipe_and_keeps_its_records_apart(compose, tmp_path):
    lines = dry_run("mlu-gate-ablation-10k", "RUN_ARGS=trainer=gpu")
    args = train_args(lines)
    assert {"scale=cpu", "paths.results_dir=results/mlu_gate_ablation_10k", "task.max_steps=10000",
            "task.val_check_interval=500", "trainer=gpu"} <= set(args)
    assert all("results/mlu_gate_ablation_10k/" in x[x.index("--out") + 1] for x in lines if "--out" in x)
    assert all("results/mlu_gate_ablation_10k" == x[x.index("--runs") + 1] for x in lines if "--runs" in x)
    cfg = compose([a for a in args if not a.startswith(("-m", "paths.", "trainer="))] + ["model=coda_transformer"], tmp_path)
    assert cfg.task.max_steps == 10000 and cfg.scheduler.total_steps == 10000  # the cosine ends at the last step


def test_the_gpu_studies_run_side_by_side_then_write_both_folders_tables():
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "mlu-studies-gpu", "GPU_BUDGET_S=300"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout.splitlines()
    (driver,) = [line for line in out if "gpu_mlu_studies.sh" in line]
    assert {"TRAINER=gpu", "BUDGET_S=300", "RESULTS_10K=results/mlu_gate_ablation_10k",
            "RESULTS_PROBES=results/mlu_coda_recipe_probes"} <= set(shlex.split(driver))
    outs = [x[x.index("--out") + 1] for x in map(shlex.split, out) if "--out" in x]
    assert outs == ["results/mlu_gate_ablation_10k/tables/gate_at_init.md",
                    "results/mlu_gate_ablation_10k/tables/gate_ablation.md",
                    "results/mlu_gate_ablation_10k/tables/by_operation.md",
                    "results/mlu_gate_ablation_10k/figures/learning_curves.png",
                    "results/mlu_coda_recipe_probes/tables/probes.md",
                    "results/mlu_coda_recipe_probes/figures/learning_curves.png"]



def test_the_gpu_driver_lists_the_10k_grid_by_priority_then_the_probes(tmp_path):
    env = {**os.environ, "LOGS": str(tmp_path), "LIST_ONLY": "1", "PY": sys.executable, "MPS": "0"}
    subprocess.run(["bash", "scripts/studies/mlu/gpu_mlu_studies.sh"], cwd=ROOT, env=env, check=True, capture_output=True)
    grid = json.loads((tmp_path / "jobs_10k.json").read_text())
    names = [j["name"] for j in grid]
    assert names[:6] == ["10k-transformer-s1", "10k-coda_transformer-s1", "10k-transformer-s2",
                         "10k-coda_transformer-s2", "10k-transformer-s3", "10k-coda_transformer-s3"]
    assert len(names) == 15 and names[12:] == [f"10k-coda_transformer_t2t-s{s}" for s in (1, 2, 3)]
    first = grid[0]
    assert first["steps"] == 10000 and first["progress"] == f"{tmp_path}/10k-transformer-s1/csv/version_*/metrics.csv"
    assert {"experiment=mlu_gate_ablation", "scale=cpu", "task.max_steps=10000", "task.val_check_interval=500",
            "trainer=gpu", "paths.results_dir=results/mlu_gate_ablation_10k",
            f"hydra.run.dir={tmp_path}/10k-transformer-s1"} <= set(first["argv"])
    probes = json.loads((tmp_path / "jobs_probes.json").read_text())
    assert len(probes) == 17 and all(j["name"].startswith("probe-") and j["steps"] == 2500 for j in probes)
    for j in probes:  # make run's budget: the recipe's own 2500 steps, one change each
        assert "paths.results_dir=results/mlu_coda_recipe_probes" in j["argv"] and "experiment=table_6" in j["argv"]
        assert not any("max_steps" in a for a in j["argv"])
    best = next(j for j in probes if j["name"] == "probe-sigmoid-e-centred-n-s3")["argv"]
    assert {"seed=3", "model.scoring.e_fn=sigmoid", "model.scoring.center_n=true"} <= set(best)
