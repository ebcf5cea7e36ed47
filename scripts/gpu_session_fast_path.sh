#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool): the tests marked gpu, Flash-CoDA timed (issue 22), the fast path
# checked against float64, its levers
# timed side by side, the 545K-pair test timed, then Table 6 at paper scale with the time that is left.
#   here:   bash scripts/gpu_wheels.sh                       (Hydra's wheels into .whl/, once)
#   device: run(command="bash scripts/gpu_session_fast_path.sh", carry=[".whl"], timeout_s=600)
# PHASES picks and orders the phases (default "gputests attn bench table6": the pytest -m gpu tests first, then
# scripts/bench_gpu_coda.py for ATTN_S seconds); TOTAL_S is the call's own limit minus a margin;
# BENCH_S caps the benchmark; LEVERS, PARALLEL, EVAL narrow it. The work goes to WORK (outputs/gpu_session, kept
# on a warm machine between calls). The device tool brings back 8 files of at most 16 MiB, 2 folders down, so $OUT
# gets: bench_fast_path.json (device, versions, commit), bench_gpu_coda.json, table6.log, session.tgz (gpu.csv, bench.log, the Table 6
# records and predictions under table_6_gpu/, each run's log, CSV metrics, resolved config, status.json) and, for
# runs that could not finish, their latest checkpoint as <model>-s<seed>.ckpt (at most 4, the most wanted first).
# To resume those in a later call: put each at outputs/gpu_session/table6_outputs/<model>-s<seed>/checkpoints/
# last.ckpt here and carry outputs/gpu_session (the working tree that travels is 64 MiB at most: ~11 MB a run).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_session_out}
WORK=${WORK:-outputs/gpu_session}
PY=${PY:-python3}
TOTAL_S=${TOTAL_S:-555}
BENCH_S=${BENCH_S:-240}
LEVERS=${LEVERS:-}
PARALLEL=${PARALLEL:-6}
EVAL=${EVAL:-545455}
PHASES=${PHASES:-gputests attn bench table6}
ATTN_S=${ATTN_S:-180}
mkdir -p "$OUT" "$WORK"
start=$(date +%s)
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONHASHSEED=0 OMP_WAIT_POLICY=PASSIVE
export CODA_EXP_COMMIT=${CODA_EXP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -d .whl ] && ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
"$PY" -c "import hydra, omegaconf, pytorch_lightning" || { echo "Hydra/omegaconf missing: bash scripts/gpu_wheels.sh here, carry .whl"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$WORK/gpu.csv" 2>&1
left() { echo $((TOTAL_S - ($(date +%s) - start))); }
for phase in $PHASES; do
    case $phase in
    gputests)  # the tests marked gpu (real CUDA graphs across a zero_grad, Flash-CoDA vs float64): a minute
        timeout 120 "$PY" -m pytest -q -p no:cacheprovider -m gpu -o addopts="" tests/test_fast_step.py \
            tests/attention/test_attend.py > "$WORK/gputests.log" 2>&1
        echo "gputests: exit $? after $(( $(date +%s) - start )) s"; tail -5 "$WORK/gputests.log";;
    attn)  # Flash-CoDA vs SDPA vs the materialising path over L, float64 check first (issue 22): ATTN_S at most
        budget=$(( $(left) < ATTN_S ? $(left) : ATTN_S ))
        timeout "$budget" "$PY" scripts/bench_gpu_coda.py --device cuda --time-budget-s $((budget - 40)) \
            --json "$OUT/bench_gpu_coda.json" > "$WORK/attn.log" 2>&1
        echo "attn: exit $? after $(( $(date +%s) - start )) s"; tail -30 "$WORK/attn.log";;
    bench)  # correctness first (graph step vs float64), then every lever, 6 processes side by side, the test set
        budget=$(( $(left) < BENCH_S ? $(left) : BENCH_S ))
        timeout "$budget" "$PY" scripts/bench_fast_path.py --device cuda --check --steps 200 --warmup 10 \
            ${LEVERS:+--levers $LEVERS} --parallel "$PARALLEL" --parallel-s 20 --parallel-startup-s 60 \
            --eval "$EVAL" --time-budget-s $((budget * 6 / 10)) \
            --json "$OUT/bench_fast_path.json" > "$WORK/bench.log" 2>&1
        echo "bench: exit $? after $(( $(date +%s) - start )) s"; tail -25 "$WORK/bench.log";;
    table6)  # whatever time is left: whole runs first (side_by_side stops the least wanted), resumable
        budget=$(( $(left) - 15 ))
        if [ "$budget" -lt 240 ]; then echo "table6: only ${budget}s left, not started"; continue; fi
        timeout "$budget" "$PY" scripts/reproduce_table6_gpu.py --budget-s $((budget - 10)) --python "$PY" \
            --results "$WORK/table_6_gpu" --outputs "$WORK/table6_outputs" > "$OUT/table6.log" 2>&1
        echo "table6: exit $? after $(( $(date +%s) - start )) s"; tail -15 "$OUT/table6.log";;
    *) echo "unknown phase $phase";;
    esac
done
# pack what came of it: one archive, and the checkpoints of unfinished runs (most wanted first) as files
names=$(cd "$WORK" && ls -d gpu.csv gputests.log attn.log bench.log table_6_gpu table6_outputs 2>/dev/null)
tar czf "$OUT/session.tgz" -C "$WORK" --exclude='*.ckpt' --exclude='.hydra' $names
"$PY" - "$WORK/table6_outputs" "$OUT" <<'PYEOF'
import json, shutil, sys
from pathlib import Path
outputs, out = Path(sys.argv[1]), Path(sys.argv[2])
status = json.loads((outputs / "status.json").read_text()) if (outputs / "status.json").is_file() else {}
kept = 0
for name in [f"{m}-s{s}" for s in (1, 2, 3) for m in ("transformer", "coda_transformer")]:
    resume = status.get(name, {}).get("resume")  # a partial run's latest checkpoint (last or interrupted)
    if resume and Path(resume).is_file() and kept < 4:
        shutil.copy(resume, out / f"{name}.ckpt")
        kept += 1
PYEOF
ls -l "$OUT"; echo "total: $(( $(date +%s) - start )) s"
