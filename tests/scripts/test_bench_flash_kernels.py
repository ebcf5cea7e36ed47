"""scripts/bench_flash_kernels.py needs a GPU: without one it says so and exits 2 (it times CUDA events)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without CUDA")
def test_without_cuda_it_says_so(load_script, capsys):
    assert load_script("bench_flash_kernels").main(["--lengths", "16"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out

