#!/usr/bin/env bash
# An earlier version of Flash-CoDA's Triton kernels for bench_flash_kernels.py --baseline (timed side by side with
# today's): writes outputs/gpu_baseline/old_triton_jit.py and old_flash_triton.py from git revision REV (default
# e93dfe6, the kernels before the session-15 rewrite; issue 22 quotes their H200 times). Then carry
# outputs/gpu_baseline to the GPU machine (scripts/gpu_session_coda.sh uses it when it is there).
#   bash scripts/gpu_baseline.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-e93dfe6}
OUT=outputs/gpu_baseline
mkdir -p "$OUT"
git show "$REV:coda_exp/attention/kernels/triton_jit.py" > "$OUT/old_triton_jit.py"
git show "$REV:coda_exp/attention/kernels/flash_triton.py" \
    | sed 's/^from coda_exp.attention.kernels import triton_jit$/import old_triton_jit as triton_jit/; s/^from coda_exp.attention.kernels.triton_jit import HAVE_TRITON$/from old_triton_jit import HAVE_TRITON/' \
    > "$OUT/old_flash_triton.py"
grep -q "^import old_triton_jit as triton_jit" "$OUT/old_flash_triton.py" || { echo "gpu_baseline: $REV's flash_triton imports its kernels differently"; exit 2; }
echo "wrote $OUT/old_triton_jit.py and $OUT/old_flash_triton.py from $REV"
