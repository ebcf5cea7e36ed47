#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool) for Flash-CoDA's Triton kernels (issue 22): every config checked
# against float64, the kernels timed against an earlier version side by side, coda_attention vs SDPA, the gpu tests.
#   here:   bash scripts/gpu_wheels.sh (Hydra's wheels into .whl/, for the gpu tests); optionally
#           bash scripts/gpu_baseline.sh (the kernels before the session-15 rewrite, timed beside today's; their
#           autotune compiles 15 configs, ~1 min)
#   device: run(command="bash scripts/gpu_session_coda.sh", carry=[".whl", "outputs/gpu_baseline"], timeout_s=600)
# PHASES picks and orders the phases. The default is what no GPU has run yet, the kernels first: 16-bit inputs'
# distances in float16 (sessions 32-33, never run on a GPU) checked against float64, then timed: "check candidates
# fits steps gputests" (every config against float64, with the check's centred and float64-masked cases that the
# H200 calls of session 31 left, CHECK_CASES / CHECK_DTYPES; the candidate configs CANDIDATES timed beside the
# shipped ones, float16 and float32 sums; Lightning fits under the 16-bit precisions, which failed there on missing
# packages; training steps of Transformer vs CoDA-Transformer with auto and chunked; the gpu tests): the caps add up
# to more than a call, so the last phases get what is left. "kernels" (every length and dtype again, after a
# kernel change), "attn" (coda_attention vs SDPA at long lengths) and "keops" (the KeOps peer beside Flash-CoDA and
# SDPA in float32) are not defaults. TOTAL_S is the
# call's own limit minus a margin. Records go to $OUT: check_cuda_coda.json, bench_crossover_cuda.json, fits.log,
# bench_candidates.json (and bench_candidates_f32l1.json: CODA_FLASH_HALF_L1=0), check_flash_triton.json,
# bench_flash_kernels.json, bench_gpu_coda.json, bench_keops.json
# (keops needs bash scripts/gpu_wheels.sh here first and carry [".whl"]). A first version of this script (14 forked
# check processes, its output through a process substitution) lost its machine ("stopped answering") without a
# word; the check spawns its processes and ends them at its own time budget (a timeout of the parent alone left
# them compiling through the next phases), and everything prints plainly.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/gpu_session_out}
PY=${PY:-python3}
TOTAL_S=${TOTAL_S:-540}
PHASES=${PHASES:-check candidates fits steps gputests}
# beside flash_triton.CONFIGS: the forward's PF 0 DC 4 capped at 168 registers (three programs per SM) and PF 1 DC 8,
# the fused backward's 128 x 64 at DC 8 (sm_90 SASS, Triton 3.6, bf16, float16 L1 and sign sums, specialised as at
# run time: scripts/sass_flash_kernels.py --configs fwd:64,64,4,0,4,2,168: 1.92, 1.67 and 6.84 instructions per pair
# and feature, against 1.65 / 1.9 / 2.04 for the shipped forward's PF 0 DC 8 / PF 0 DC 4 / PF 2 DC 8 and 6.74 for
# the backward's (128, 64) DC 4; results/bench/sass_sm90_triton36_aligned.json)
CANDIDATES=${CANDIDATES:-fwd:64,64,4,0,4,2,168;fwd:64,64,8,1,4,2;bwd:128,64,8,2,8,2}
CHECK_CASES=${CHECK_CASES-centred_rows_causal_masks,centred_slice_shared,shared_algebraic_long,masks_causal_dropout_unshared}
CHECK_DTYPES=${CHECK_DTYPES:-bfloat16,float32,float64}
mkdir -p "$OUT"
keops_env() {  # what KeOps needs here: its wheels, pybind11 for a child python, a writable cache, CUDA it can find
    if ! "$PY" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('pykeops') and u.find_spec('pybind11')))"; then
        [ -d .whl ] && "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl
        # exported, not just set: KeOps' compiler runs `$PY -m pybind11 --includes` in a child process
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    export KEOPS_CACHE_FOLDER=${KEOPS_CACHE_FOLDER:-/tmp/keops_cache}  # ~/.cache may not be writable
    # torch's pip CUDA: cuda.h + nvrtc.h in one folder and unversioned libnvrtc.so / libcuda.so, as KeOps looks
    local exports
    exports=$("$PY" scripts/keops_cuda_env.py --prefix /tmp/keops_cuda)
    grep '^#' <<< "$exports"
    eval "$exports"
    "$PY" -m pybind11 --includes || echo "keops: pybind11 not importable by a child python"
    echo "keops: CUDA_PATH=${CUDA_PATH:-} KEOPS_CACHE_FOLDER=$KEOPS_CACHE_FOLDER"
}
hydra_wheels() {  # Hydra, omegaconf and datasets, which the image lacks, from the carried wheels (tests, train.py)
    if [ -d .whl ] && ! "$PY" -c "import hydra, omegaconf, datasets" 2>/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
}
start=$(date +%s)
left() { echo $((TOTAL_S - ($(date +%s) - start))); }
# cap N: the seconds a phase may take, at most N, all that is left if less; 0 when under 20 are left (skip it)
cap() { local l; l=$(left); [ "$l" -lt 20 ] && { echo 0; return; }; echo $(( l < $1 ? l : $1 )); }
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONHASHSEED=0 OMP_WAIT_POLICY=PASSIVE HYDRA_FULL_ERROR=1
export CODA_EXP_COMMIT=${CODA_EXP_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
for phase in $PHASES; do
    case $phase in
    check)  # every autotune config of the kernels, split and fused backward, against float64, in spawned processes
            # (compiling dominates: ~2 s a config on one core, 13 configs per case and dtype; the JSON keeps the
            # cases done if the cap cuts it; CHECK_CASES= CHECK_DTYPES=bfloat16,float32,float16,float64: all)
        budget=$(cap 140); [ "$budget" -eq 0 ] && { echo "check: skipped, no time left"; continue; }
        timeout "$budget" "$PY" scripts/check_flash_triton.py --jobs ${CHECK_JOBS:-10} --time-budget-s $((budget - 10)) \
            --cases "$CHECK_CASES" --dtypes "$CHECK_DTYPES" --json "$OUT/check_flash_triton.json"
        echo "check: exit $? after $(( $(date +%s) - start )) s";;
    kernels)  # the kernels alone, split vs fused backward (vs baseline), bf16 and fp32
        budget=$(cap 130); [ "$budget" -eq 0 ] && { echo "kernels: skipped, no time left"; continue; }
        base=""; [ -f outputs/gpu_baseline/old_flash_triton.py ] && base="--baseline outputs/gpu_baseline"
        timeout "$budget" "$PY" scripts/bench_flash_kernels.py $base --lengths 1024,4096,16384 --dtypes bfloat16,float32 \
            --time-budget-s $((budget - 20)) --json "$OUT/bench_flash_kernels.json"
        echo "kernels: exit $? after $(( $(date +%s) - start )) s";;
    crossover)  # CUDA's auto rule: flash vs chunked (and SDPA) fwd+bwd at short lengths, then training steps of
                # Transformer vs CoDA-Transformer with auto and chunked (MLU tiny, transformer_base at 50 and 1024)
        budget=$(cap 150); [ "$budget" -eq 0 ] && { echo "crossover: skipped, no time left"; continue; }
        timeout "$budget" "$PY" scripts/bench_gpu_coda.py --device cuda --lengths 32,64,128,256,512 --tokens 16384 \
            --dtypes float32,bfloat16 --causal 0 --reps 5 --profile-length 0 --train-kernels auto,chunked \
            --time-budget-s $((budget - 15)) --json "$OUT/bench_crossover_cuda.json" | tail -40
        echo "crossover: exit $? after $(( $(date +%s) - start )) s";;
    candidates)  # CANDIDATES timed by the same autotune beside flash_triton.CONFIGS (bf16, L 4096, fused backward),
                 # then the same with the L1 sums in float32 (CODA_FLASH_HALF_L1=0: the kernels before float16 sums)
        budget=$(cap 150); [ "$budget" -eq 0 ] && { echo "candidates: skipped, no time left"; continue; }
        half=$((budget * 3 / 5))
        timeout "$half" "$PY" scripts/bench_flash_kernels.py --lengths 4096 --dtypes bfloat16 --backwards fused \
            --candidates "$CANDIDATES" --time-budget-s $((half - 15)) --json "$OUT/bench_candidates.json"
        echo "candidates: exit $? after $(( $(date +%s) - start )) s"
        rest=$(cap $((budget - half))); [ "$rest" -eq 0 ] && continue
        CODA_FLASH_HALF_L1=0 timeout "$rest" "$PY" scripts/bench_flash_kernels.py --lengths 4096 --dtypes bfloat16 \
            --backwards fused --time-budget-s $((rest - 15)) --json "$OUT/bench_candidates_f32l1.json"
        echo "candidates (float32 L1 sums): exit $? after $(( $(date +%s) - start )) s";;
    cuda)  # every precision x kernel against float64, CUDA graphs, torch.compile(fullgraph) against eager
        budget=$(cap 150); [ "$budget" -eq 0 ] && { echo "cuda: skipped, no time left"; continue; }
        timeout "$budget" "$PY" scripts/check_cuda_coda.py --device cuda --time-budget-s $((budget - 30)) \
            --parts "${CUDA_PARTS:-graphs,precisions,compile}" --json "$OUT/check_cuda_coda.json" 2>&1 | grep -v Warning
        echo "cuda: exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s";;
    fp32)  # float32 since its tl.dot takes three TF32 products (it was "ieee", FMAs, under torch's default "highest"
           # matmul precision): coda_attention at short lengths as the crossover phase runs it (the first H200 call's
           # float32 rows are the before), then the kernels alone at L 4096
        budget=$(cap 100); [ "$budget" -eq 0 ] && { echo "fp32: skipped, no time left"; continue; }
        timeout $((budget * 3 / 5)) "$PY" scripts/bench_gpu_coda.py --device cuda --lengths 32,128,512 --tokens 16384 \
            --dtypes float32 --causal 0 --reps 5 --profile-length 0 --train-steps "" \
            --time-budget-s $((budget * 3 / 5 - 10)) --json "$OUT/bench_fp32_cuda.json" | tail -12
        echo "fp32 (attention): exit $? after $(( $(date +%s) - start )) s"
        budget=$(cap 60); [ "$budget" -eq 0 ] && { echo "fp32 kernels: skipped, no time left"; continue; }
        timeout "$budget" "$PY" scripts/bench_flash_kernels.py --lengths 4096 --dtypes float32 --backwards fused \
            --time-budget-s $((budget - 10)) --json "$OUT/bench_fp32_kernels.json"
        echo "fp32 (kernels): exit $? after $(( $(date +%s) - start )) s";;
    steps)  # training steps, Transformer vs CoDA-Transformer, CoDA with auto and chunked, eager (MLU tiny,
            # transformer_base at 50 and 1024 tokens; bf16-mixed and float32), SDPA at one length beside them
        budget=$(cap 150); [ "$budget" -eq 0 ] && { echo "steps: skipped, no time left"; continue; }
        timeout "$budget" "$PY" scripts/bench_gpu_coda.py --device cuda --lengths 1024 --impls sdpa \
            --dtypes bfloat16,float32 --causal 0 --profile-length 0 --train-steps mlu_tiny,base_50,base_1024 \
            --train-kernels auto,chunked --reps 5 --time-budget-s $((budget - 15)) \
            --json "$OUT/bench_train_steps.json" | tail -16
        echo "steps: exit $? after $(( $(date +%s) - start )) s";;
    attn)  # through coda_attention: Flash-CoDA vs SDPA vs the materialising path (bf16), float64 check first;
           # training steps with auto and chunked (CUDA's crossover); causal (ATTN_CAUSAL=0,1) compiles all again
        budget=$(( $(left) - 45 ))
        [ "$budget" -lt 40 ] && { echo "attn: only ${budget}s left, skipped"; continue; }
        timeout "$budget" "$PY" scripts/bench_gpu_coda.py --device cuda --lengths 1024,4096,16384 --dtypes bfloat16 \
            --causal ${ATTN_CAUSAL:-0} --reps 5 --train-kernels auto,chunked --time-budget-s $((budget - 15)) \
            --json "$OUT/bench_gpu_coda.json" | tail -24
        echo "attn: exit $? after $(( $(date +%s) - start )) s";;
    keops)  # the KeOps peer (coda_exp.peers.keops_coda) beside Flash-CoDA and SDPA, float32 (KeOps has no bf16):
            # a child-process probe first (a failure is recorded in the JSON, the phase goes on), its float64 check,
            # then rows of at most 60 s each, compiling included
        keops_env
        budget=$(cap 240)
        [ "$budget" -lt 60 ] && { echo "keops: only ${budget}s left, skipped"; continue; }
        timeout "$budget" "$PY" scripts/bench_gpu_coda.py --device cuda --lengths 1024,4096 --dtypes float32 \
            --causal 0,1 --impls sdpa,flash,keops --reps 5 --keops-budget-s 60 --profile-length 0 --train-steps "" \
            --time-budget-s $((budget - 15)) --json "$OUT/bench_keops.json" | tail -20
        echo "keops: exit $? after $(( $(date +%s) - start )) s";;
    fits)  # Lightning fits on CUDA (train.py, fixture data): a CoDA Transformer under each 16-bit precision and
           # DecompAtt + CoDA in bf16-mixed; each run's exit status, then its record's kernels and metrics (fits.log)
        hydra_wheels
        mkdir -p /tmp/fits
        for spec in "mlu coda_transformer bf16-true" "mlu coda_transformer bf16-mixed" \
                    "mlu coda_transformer 16-mixed" "wikiqa decompatt_coda bf16-mixed"; do
            set -- $spec
            budget=$(cap 60); [ "$budget" -eq 0 ] && { echo "fits: no time left for $spec" | tee -a "$OUT/fits.log"; break; }
            budget_args="task.max_steps=4 task.val_check_interval=2"; [ "$1" = wikiqa ] && budget_args="task.epochs=1"
            dir=/tmp/fits/$1_$3
            timeout "$budget" "$PY" train.py task=$1 model=$2 scale=fixture trainer=gpu trainer.precision=$3 \
                $budget_args logger=none save_predictions=false paths.results_root=$dir/results \
                hydra.run.dir=$dir/run > "$dir.log" 2>&1
            echo "fits: $spec exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/fits.log"
            tail -${FITS_TAIL:-25} "$dir.log" >> "$OUT/fits.log"
            "$PY" - "$dir/results/runs" >> "$OUT/fits.log" 2>&1 <<'PYEOF'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    rec = json.loads(path.read_text())
    print(rec.get("status"), rec.get("attention_kernels"), rec.get("metrics"))
PYEOF
        done
        echo "fits: done after $(( $(date +%s) - start )) s";;
    gputests)  # the tests marked gpu (real CUDA graphs across a zero_grad, Flash-CoDA vs float64)
        hydra_wheels
        budget=$(cap 60); [ "$budget" -eq 0 ] && { echo "gputests: skipped, no time left"; continue; }
        timeout "$budget" "$PY" -m pytest -q -p no:cacheprovider -m gpu -o addopts="" \
            tests/test_fast_step.py tests/attention/test_attend.py 2>&1 | tail -5
        echo "gputests: exit $? after $(( $(date +%s) - start )) s";;
    *) echo "unknown phase $phase";;
    esac
done
ls -l "$OUT"; echo "total: $(( $(date +%s) - start )) s"
