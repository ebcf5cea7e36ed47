#!/usr/bin/env bash
# The MLU studies (gate scale, CoDA recipe probes) on one GPU, every run side by side (scripts/side_by_side.py), within a time budget:
#   1. the gate study at 10K steps (make mlu-gate-ablation-10k's grid: 5 models x seeds 1-3, gate statistics on)
#      -> results/mlu_gate_ablation_10k/{runs,predictions}
#   2. CoDA recipe probes at make run's budget (2500 steps, one change each)  -> results/mlu_coda_recipe_probes/
# STUDIES="10k probes" (default) picks them; each runs within its own budget (BUDGET_S, PROBE_BUDGET_S).
# Every run is `python train.py ...` as the Makefile would run it, plus trainer=gpu and where it logs (keys that
# change no fingerprint). A run stopped for time leaves no record.
#   TRAINER=gpu bash scripts/studies/mlu/gpu_mlu_studies.sh          (on a GPU machine; PY=python3 by default)
#   TRAINER=cpu STEPS_10K=260 VAL_10K=100 STEPS_PROBE=260 SMALL=1 ONLY='-s1$|probe-peak1e-3' \
#       bash scripts/studies/mlu/gpu_mlu_studies.sh                   (a dry run on a CPU; every schedule warms up over 200 steps)
# ONLY=REGEX keeps the jobs whose name matches; LIST_ONLY=1 writes the job lists and runs nothing. MPS=1 starts
# NVIDIA's MPS daemon first (kernels of the side-by-side processes then share the GPU instead of taking time
# slices), checks a CUDA process can run under it, and stops it at the end (or goes on without it).
set -uo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-python3}
BUDGET_S=${BUDGET_S:-510}          # the 10K grid's budget (seconds)
PROBE_BUDGET_S=${PROBE_BUDGET_S:-240}  # the probes' budget
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
"$PY" - "$LOGS" <<EOF
import json, re, sys
trainer, steps, val, probe_steps = "$TRAINER", $STEPS_10K, $VAL_10K, $STEPS_PROBE
small = ["data.num_validation=50", "data.num_test=50"] if "$SMALL" == "1" else []
quiet = ["~callbacks.progress_bar", "+trainer.enable_progress_bar=false"]
studies = {"10k": [], "probes": []}
def add(study, name, overrides, n):
    out = f"$LOGS/{name}"
    studies[study].append({"name": name, "steps": n, "progress": f"{out}/csv/version_*/metrics.csv",
                           "argv": ["$PY", "train.py", *overrides, f"trainer={trainer}", f"hydra.run.dir={out}",
                                    *quiet, *small]})
grid = ["experiment=mlu_gate_ablation", "scale=cpu", "paths.results_dir=$RESULTS_10K",
        f"task.max_steps={steps}", f"task.val_check_interval={val}"]
order = [["transformer", "coda_transformer"], ["coda_transformer_center_n", "coda_transformer_beta_dk"],
         ["coda_transformer_t2t"]]
for models in order:  # priority: the main comparison first, then the gate readings, T2T's last
    for seed in (1, 2, 3):
        for model in models:
            add("10k", f"10k-{model}-s{seed}", [*grid, f"model={model}", f"seed={seed}"], steps)
# CoDA recipe probes at make run's budget: the recipe with one change each (seed 1 unless stated), round 1 then
# round 2 (results/mlu_coda_recipe_probes/README.md)
probe = ["experiment=table_6", "scale=cpu", "callbacks=gate_stats", "paths.results_dir=$RESULTS_PROBES"] + (
    [f"task.max_steps={probe_steps}"] if probe_steps != 2500 else [])
sigmoid, centred = "model.scoring.e_fn=sigmoid", "model.scoring.center_n=true"
for name, model, seed, extra in [
        ("peak1e-3", "coda_transformer", 1, ["task.cpu_scheduler.peak_lr=1e-3"]),
        ("peak1.5e-3", "coda_transformer", 1, ["task.cpu_scheduler.peak_lr=1.5e-3"]),
        ("clip1", "coda_transformer", 1, ["+task.gradient_clip_val=1.0"]),
        ("warmup1000", "coda_transformer", 1, ["task.cpu_scheduler.warmup_steps=1000"]),
        ("sigmoid-e", "coda_transformer", 1, [sigmoid]),
        ("sigmoid-e-centred-n", "coda_transformer", 1, [sigmoid, centred]),
        ("sigmoid-e-s2", "coda_transformer", 2, [sigmoid]),
        ("sigmoid-e-centred-n-s2", "coda_transformer", 2, [sigmoid, centred]),
        ("sigmoid-e-centred-n-s3", "coda_transformer", 3, [sigmoid, centred]),
        ("sigmoid-e-no-gate", "coda_transformer", 1, [sigmoid, "model.scoring.beta=0"]),
        ("alpha2", "coda_transformer", 1, ["model.scoring.alpha=2"]),
        ("alpha0.5", "coda_transformer", 1, ["model.scoring.alpha=0.5"]),
        ("unscaled", "coda_transformer", 1, ["model.scoring.scale=false"]),
        ("adam-beta2-0.98", "coda_transformer", 1, ["optimizer.betas=[0.9,0.98]"]),
        ("post-norm", "coda_transformer", 1, ["model.prenorm=false"]),
        ("centred-n-peak3e-3", "coda_transformer", 1, [centred, "task.cpu_scheduler.peak_lr=3e-3"]),
        ("transformer-adam-beta2-0.98", "transformer", 1, ["optimizer.betas=[0.9,0.98]"])]:
    add("probes", f"probe-{name}", [*probe, f"model={model}", f"seed={seed}", *extra], probe_steps)
for study, jobs in studies.items():
    jobs = [j for j in jobs if re.search("${ONLY:-.}", j["name"])]  # ONLY=regex: a subset (dry runs)
    json.dump(jobs, open(f"{sys.argv[1]}/jobs_{study}.json", "w"), indent=1)
    print(study, len(jobs), "jobs")
EOF
[ "${LIST_ONLY:-0}" = 1 ] && exit 0  # LIST_ONLY=1: write $LOGS/jobs_{10k,probes}.json and stop
status=0
for study in ${STUDIES:-10k probes}; do  # one study after the other, each within its own budget
    budget=$BUDGET_S; [ "$study" = probes ] && budget=$PROBE_BUDGET_S
    if [ "$("$PY" -c "import json, sys; print(len(json.load(open(sys.argv[1]))))" "$LOGS/jobs_$study.json")" = 0 ]; then
        continue
    fi
    echo "== $study: budget ${budget}s"
    "$PY" scripts/side_by_side.py --jobs "$LOGS/jobs_$study.json" --budget-s "$budget" --logs "$LOGS/$study" \
        --max-parallel "${MAX_PARALLEL:-32}" || status=1
done
[ "$mps_started" = 1 ] && { echo quit | nvidia-cuda-mps-control; echo "MPS: stopped"; }
exit $status
