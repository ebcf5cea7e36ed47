#!/usr/bin/env bash
# The wheels a lent GPU machine lacks for train.py (its image has torch, lightning, numba, triton; not Hydra):
# downloaded here into .whl/ (git-ignored), carried with the call (device tool: carry [".whl"]) and installed there:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#       .whl/*.whl && export PYTHONPATH=/tmp/site
# (scripts/gpu_session_fast_path.sh does that itself when .whl/ is there). Versions: those of this project's .venv.
# The image has pyarrow, pandas and xxhash (datasets 5.2 wants pyarrow >= 24: if the image's is older, the pair
# tasks fail there with an import error; MLU and AlgoLisp need no datasets).
# Also the KeOps peer's (scripts/bench_gpu_coda.py --impls ...,keops; gpu_session_coda.sh's keops phase): pykeops,
# keopscore (source archives only on PyPI: built here into pure-Python wheels) and pybind11 (KeOps' compiler runs
# `python -m pybind11 --includes` in a child process, so /tmp/site must be in the exported PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"
mkdir -p .whl
# datasets and what the image lacks of its needs (dill, multiprocess): the pair and text tasks' Arrow datasets
# (gpu_session_coda.sh's fits: DecompAtt + CoDA on WikiQA). Not huggingface_hub: the image has its own, and 2.4
# carried beside it wants httpx2, which the image lacks (an H200 call, 2026-11-28: every train.py run and the gpu
# tests failed on that import)
for spec in hydra-core==1.3.8 omegaconf==2.3.1 pybind11==3.1.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d .whl "$spec"
done
# antlr4-python3-runtime 4.9.3 (omegaconf's pin) exists only as a source archive: build its wheel here
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
# pykeops, keopscore: source archives only, their wheels pure Python (py3-none-any; they compile C++ when first used)
python3 -m pip wheel -q --no-deps -w .whl pykeops==2.3 keopscore==2.3
ls -l .whl
