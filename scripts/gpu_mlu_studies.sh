#!/usr/bin/env bash
# The MLU studies of issue 13 on one GPU, every run side by side (scripts/side_by_side.py), within a time budget:
#   1. the gate study at 10K steps (make mlu-gate-ablation-10k's grid: 5 models x seeds 1-3, gate statistics on)
#      -> results/mlu_gate_ablation_10k/{runs,predictions}
#   2. CoDA recipe probes at make run's budget (2500 steps, seed 1)   -> results/mlu_coda_recipe_probes/
# Every run is `python train.py ...` as the Makefile would run it, plus trainer=gpu and where it logs (keys that
# change no fingerprint). A run stopped for time leaves no record.
#   BUDGET_S=540 TRAINER=gpu bash scripts/gpu_mlu_studies.sh          (on a GPU machine; PY=python3 by default)
#   BUDGET_S=300 TRAINER=cpu STEPS_10K=150 STEPS_PROBE=100 SMALL=1 bash scripts/gpu_mlu_studies.sh  (a dry run)
# ONLY=REGEX keeps the jobs whose name matches; LIST_ONLY=1 writes the job list and runs nothing. MPS=1 starts NVIDIA's MPS daemon first (kernels of the side-by-side processes then share the GPU instead of
# taking time slices), checks a CUDA process can run under it, and stops it at the end (or goes on without it).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-540}
TRAINER=${TRAINER:-gpu}
STEPS_10K=${STEPS_10K:-10000}
VAL_10K=${VAL_10K:-500}
STEPS_PROBE=${STEPS_PROBE:-2500}
RESULTS_10K=${RESULTS_10K:-results/mlu_gate_ablation_10k}
RESULTS_PROBES=${RESULTS_PROBES:-results/mlu_coda_recipe_probes}
LOGS=${LOGS:-outputs/side_by_side}
SMALL=${SMALL:-0}   # 1: tiny validation/test sets (dry runs only; a budget key, so the records say so)
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONHASHSEED=0 OMP_WAIT_POLICY=PASSIVE

mps_started=0
if [ "${MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d && timeout 60 "$PY" -c "import torch; assert torch.ones(2, device='cuda').sum().item() == 2"; then
        mps_started=1; echo "MPS: on"
    else
        echo quit | nvidia-cuda-mps-control 2>/dev/null; sleep 2
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; echo "MPS: could not start; going on without it"
    fi
fi

mkdir -p "$LOGS"
"$PY" - "$LOGS/jobs.json" <<EOF
import json, sys
trainer, steps, val, probe_steps = "$TRAINER", $STEPS_10K, $VAL_10K, $STEPS_PROBE
small = ["data.num_validation=50", "data.num_test=50"] if "$SMALL" == "1" else []
quiet = ["~callbacks.progress_bar", "+trainer.enable_progress_bar=false"]
jobs = []
def add(name, overrides, n):
    out = f"$LOGS/{name}"
    jobs.append({"name": name, "steps": n, "progress": f"{out}/csv/version_*/metrics.csv",
                 "argv": ["$PY", "train.py", *overrides, f"trainer={trainer}", f"hydra.run.dir={out}", *quiet, *small]})
grid = ["experiment=mlu_gate_ablation", "scale=cpu", "paths.results_dir=$RESULTS_10K",
        f"task.max_steps={steps}", f"task.val_check_interval={val}"]
order = [["transformer", "coda_transformer"], ["coda_transformer_center_n", "coda_transformer_beta_dk"],
         ["coda_transformer_t2t"]]
for models in order:  # priority: the main comparison first, then the gate readings, T2T's last
    for seed in (1, 2, 3):
        for model in models:
            add(f"10k-{model}-s{seed}", [*grid, f"model={model}", f"seed={seed}"], steps)
probe = ["experiment=table_6", "scale=cpu", "model=coda_transformer", "seed=1", "callbacks=gate_stats",
         "paths.results_dir=$RESULTS_PROBES"] + ([f"task.max_steps={probe_steps}"] if probe_steps != 2500 else [])
for name, extra in [("peak1e-3", ["task.cpu_scheduler.peak_lr=1e-3"]),
                    ("peak1.5e-3", ["task.cpu_scheduler.peak_lr=1.5e-3"]),
                    ("clip1", ["+task.gradient_clip_val=1.0"]),
                    ("warmup1000", ["task.cpu_scheduler.warmup_steps=1000"])]:
    add(f"probe-coda-{name}", [*probe, *extra], probe_steps)
import re
jobs = [j for j in jobs if re.search("${ONLY:-.}", j["name"])]  # ONLY=regex: a subset (dry runs)
json.dump(jobs, open(sys.argv[1], "w"), indent=1)
print(len(jobs), "jobs")
EOF
[ "${LIST_ONLY:-0}" = 1 ] && exit 0  # LIST_ONLY=1: write $LOGS/jobs.json and stop
"$PY" scripts/side_by_side.py --jobs "$LOGS/jobs.json" --budget-s "$BUDGET_S" --logs "$LOGS" --max-parallel "${MAX_PARALLEL:-32}"
status=$?
[ "$mps_started" = 1 ] && { echo quit | nvidia-cuda-mps-control; echo "MPS: stopped"; }
exit $status
