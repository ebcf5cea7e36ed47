"""The prepared calls for a lent GPU machine (``scripts/gpu_session_*.sh``) run there once, with minutes of GPU time
and no second try: here each runs through with a stand-in python that parses every ``scripts/*.py`` command line
with that script's own parser (and runs nothing), so a renamed flag, a bad value or a missing test file fails here,
not on the GPU."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from tests import ROOT

# a python for the session scripts: a script's command line goes through its parser only; -m pytest checks that
# its test files exist; probes (-c), pip, pybind11 and a here-document (-) succeed without running anything
SHIM = """#!/usr/bin/env bash
case "$1" in
    scripts/*.py) "$REAL_PY" "$ARGCHECK" "$@"; rc=$?;;
    -m) rc=0; if [ "$2" = pytest ]; then for a in "$@"; do
            case "$a" in tests/*) [ -e "$a" ] || { echo "no test file $a"; rc=4; };; esac; done; fi;;
    -) cat > /dev/null; rc=0;;
    *) rc=0;;
esac
printf '%s\\t%s\\n' "$rc" "$*" >> "$CALLS"
exit $rc
"""

# parses a script's command line with its own argparse parser, then stops: exit 0 parsed, 2 refused, 3 no parser
ARGCHECK = """import argparse, runpy, sys
class Parsed(Exception):
    pass
parse = argparse.ArgumentParser.parse_args
def parse_then_stop(self, args=None, namespace=None):
    parse(self, args, namespace)
    raise Parsed
argparse.ArgumentParser.parse_args = parse_then_stop
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except Parsed:
    sys.exit(0)
sys.exit(3)
"""


def _stand_in(tmp_path) -> dict[str, str]:
    """The environment that makes ``$PY`` the stand-in; its calls go to ``calls.tsv`` (exit status, arguments)."""
    shim, argcheck = tmp_path / "py", tmp_path / "argcheck.py"
    shim.write_text(SHIM)
    shim.chmod(0o755)
    argcheck.write_text(ARGCHECK)
    return {**os.environ, "PY": str(shim), "REAL_PY": sys.executable, "ARGCHECK": str(argcheck),
            "CALLS": str(tmp_path / "calls.tsv"), "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work")}


def _calls(tmp_path) -> list[tuple[int, list[str]]]:
    rows = [line.split("\t", 1) for line in (tmp_path / "calls.tsv").read_text().splitlines()]
    return [(int(rc), shlex.split(cmd)) for rc, cmd in rows]


def _session(tmp_path, script: str, **env) -> list[tuple[int, list[str]]]:
    proc = subprocess.run(["bash", str(ROOT / "scripts" / script)], capture_output=True, text=True, timeout=240,
                          check=False, env={**_stand_in(tmp_path), "PYTHONPATH": str(ROOT), **env})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "unknown phase" not in proc.stdout
    return _calls(tmp_path)


def _scripts(calls) -> dict[str, int]:
    return {args[0]: rc for rc, args in calls if args[0].startswith("scripts/")}


@pytest.mark.parametrize("phases,expected", [
    ("cuda crossover candidates check gputests", {"scripts/check_cuda_coda.py", "scripts/bench_gpu_coda.py",
                                                  "scripts/bench_flash_kernels.py", "scripts/check_flash_triton.py"}),
    # not default phases; their scripts' parsers are met above (~5 s: make test keeps the defaults')
    pytest.param("kernels attn", {"scripts/bench_flash_kernels.py", "scripts/bench_gpu_coda.py"},
                 marks=pytest.mark.slow),
    pytest.param("keops", {"scripts/keops_cuda_env.py", "scripts/bench_gpu_coda.py"}, marks=pytest.mark.slow)])
def test_the_coda_session_s_command_lines_parse(tmp_path, phases, expected):
    calls = _session(tmp_path, "gpu_session_coda.sh", PHASES=phases)
    assert _scripts(calls) == dict.fromkeys(expected, 0), calls
    if "gputests" in phases:
        assert [rc for rc, args in calls if args[:2] == ["-m", "pytest"]] == [0]


@pytest.mark.slow  # ~5 s: three scripts import torch to parse their command lines; make test keeps the coda session's
def test_the_fast_path_session_s_command_lines_parse(tmp_path):
    calls = _session(tmp_path, "gpu_session_fast_path.sh")
    assert _scripts(calls) == dict.fromkeys(["scripts/bench_gpu_coda.py", "scripts/bench_fast_path.py",
                                             "scripts/reproduce_table6_gpu.py"], 0), calls
    assert [rc for rc, args in calls if args[:2] == ["-m", "pytest"]] == [0]


def test_the_stand_in_refuses_a_bad_command_line(tmp_path):
    """The check can fail: an unknown flag is refused by the script's parser, a missing test file by the shim."""
    session = tmp_path / "scripts" / "gpu_session_bad.sh"
    session.parent.mkdir()
    session.write_text('cd "$(dirname "$0")/.."\n"$PY" scripts/bench_gpu_coda.py --no-such-flag 1\n'
                       '"$PY" scripts/bench_gpu_coda.py --lengths 1\n"$PY" -m pytest tests/no_such_test.py\n')
    (tmp_path / "scripts" / "bench_gpu_coda.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--lengths')\n"
        "parser.parse_args()\nraise SystemExit('parsed, then ran')\n")
    subprocess.run(["bash", str(session)], capture_output=True, text=True, timeout=120, check=False,
                   env=_stand_in(tmp_path))
    assert [rc for rc, _ in _calls(tmp_path)] == [2, 0, 4]


def test_the_coda_session_s_fits_compose(tmp_path, compose):
    """The fits phase's train.py command lines (which the stand-in runs nothing of) compose: every override is a key
    of the configs, each run is a CoDA model at the fixture scale on the GPU trainer."""
    calls = _session(tmp_path, "gpu_session_coda.sh", PHASES="fits")
    fits = [args[1:] for _, args in calls if args and args[0] == "train.py"]
    assert len(fits) == 4
    for overrides in fits:
        cfg = compose([o for o in overrides if not o.startswith("hydra.")], tmp_path / "cfg")
        assert cfg.trainer.accelerator == "gpu" and "coda" in cfg.model.name and cfg.scale_name == "fixture"
        assert cfg.trainer.precision in ("bf16-true", "bf16-mixed", "16-mixed")
