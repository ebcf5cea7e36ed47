#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool) for issue 19: the fast path checked against float64, its levers
# timed side by side, the 545K-pair test timed, then Table 6 at paper scale with the time that is left.
#   here:   bash scripts/gpu_wheels.sh                       (Hydra's wheels into .whl/, once)
#   device: run(command="bash scripts/gpu_session_fast_path.sh", carry=[".whl"], timeout_s=600)
# PHASES picks and orders the phases (default "bench table6"); TOTAL_S is the call's own limit minus a margin;
# BENCH_S caps the benchmark. Everything lands under $OUT (the device tool brings it back): bench_fast_path.json
# (device, versions, commit), the logs, and table_6_gpu/ (records, predictions; tables are made here afterwards:
# make reproduce-table-6-gpu TABLE6_DIR=<that folder> runs nothing new and writes them). A Table 6 run that could
# not finish leaves its last.ckpt under $OUT/table6_outputs; a later call that carries that folder back resumes it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_session}
PY=${PY:-python3}
TOTAL_S=${TOTAL_S:-570}
BENCH_S=${BENCH_S:-240}
PHASES=${PHASES:-bench table6}
mkdir -p "$OUT"
start=$(date +%s)
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONHASHSEED=0 OMP_WAIT_POLICY=PASSIVE
export CODA_EXP_COMMIT=${CODA_EXP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -d .whl ] && ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
"$PY" -c "import hydra, omegaconf, pytorch_lightning" || { echo "Hydra/omegaconf missing: bash scripts/gpu_wheels.sh here, carry .whl"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
left() { echo $((TOTAL_S - ($(date +%s) - start))); }
for phase in $PHASES; do
    case $phase in
    bench)  # correctness first (graph step vs float64), then every lever, 6 processes side by side, the test set
        budget=$(( $(left) < BENCH_S ? $(left) : BENCH_S ))
        timeout "$budget" "$PY" scripts/bench_fast_path.py --device cuda --check --steps 200 --warmup 10 \
            --parallel 6 --parallel-s 20 --parallel-startup-s 60 --eval 545455 --time-budget-s $((budget - 100)) \
            --json "$OUT/bench_fast_path.json" > "$OUT/bench.log" 2>&1
        echo "bench: exit $? after $(( $(date +%s) - start )) s"; tail -25 "$OUT/bench.log";;
    table6)  # whatever time is left: whole runs first (side_by_side stops the least wanted), resumable
        budget=$(( $(left) - 15 ))
        if [ "$budget" -lt 240 ]; then echo "table6: only ${budget}s left, not started"; continue; fi
        timeout "$budget" "$PY" scripts/reproduce_table6_gpu.py --budget-s $((budget - 10)) --python "$PY" \
            --results "$OUT/table_6_gpu" --outputs "$OUT/table6_outputs" > "$OUT/table6.log" 2>&1
        echo "table6: exit $? after $(( $(date +%s) - start )) s"; tail -15 "$OUT/table6.log";;
    *) echo "unknown phase $phase";;
    esac
done
