#!/usr/bin/env bash
# The wheels a lent GPU machine lacks for train.py (its image has torch, lightning, numba, triton; not Hydra):
# downloaded here into .whl/ (git-ignored), carried with the call (device tool: carry [".whl"]) and installed there:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#       .whl/*.whl && export PYTHONPATH=/tmp/site
# (scripts/gpu_session_fast_path.sh does that itself when .whl/ is there). Versions: those of this project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
mkdir -p .whl
for spec in hydra-core==1.3.8 omegaconf==2.3.1; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d .whl "$spec"
done
# antlr4-python3-runtime 4.9.3 (omegaconf's pin) exists only as a source archive: build its wheel here
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
ls -l .whl
