"""scripts/bench_flash_kernels.py needs a GPU: without one it says so and exits 2 (it times CUDA events)."""

from __future__ import annotations

import types

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without CUDA")
def test_without_cuda_it_says_so(load_script, capsys):
    assert load_script("bench_flash_kernels").main(["--lengths", "16"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_each_row_names_what_autotune_chose_and_timed(load_script):
    """``autotuned``: per kernel the config its last call ran and every config's time (lists or single numbers, as
    Triton versions keep them); kernels not yet run are left out."""

    class Tuner:
        def __init__(self, best, timings):
            self.best_config, self.configs_timings = best, timings

    module = types.SimpleNamespace(_TUNED={"fwd": Tuner("BLOCK_M: 128, PF: 1", {"PF 0": [4.5, 4.4, 4.6], "PF 1": 3.25}),
                                           "dq": Tuner(None, {})})
    assert load_script("bench_flash_kernels").autotuned(module) == {
        "fwd": {"best": "BLOCK_M: 128, PF: 1", "timings_ms": {"PF 0": [4.5, 4.4, 4.6], "PF 1": [3.25]}}}
