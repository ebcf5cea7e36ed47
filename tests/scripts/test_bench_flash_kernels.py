"""scripts/bench_flash_kernels.py needs a GPU: without one it says so and exits 2 (it times CUDA events)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without CUDA")
def test_without_cuda_it_says_so(load_script, capsys):
    assert load_script("bench_flash_kernels").main(["--lengths", "16"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out



def test_candidate_configs_parse_or_name_what_is_wrong(load_script):
    """--candidates (and sass_flash_kernels --configs): kernel:six or seven integers, ';'-separated."""
    import argparse

    parse = load_script("bench_flash_kernels").parse_configs
    assert parse("fwd:64,64,2,1,4,2,128; fwd:32,64,2,1,4,2;bwd:64,64,2,1,4,3;") == {
        "fwd": [(64, 64, 2, 1, 4, 2, 128), (32, 64, 2, 1, 4, 2)], "bwd": [(64, 64, 2, 1, 4, 3)]}
    for bad in ("fwd:64,64,2", "forward:64,64,2,1,4,2", "fwd:64,x,2,1,4,2"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected kernel:BLOCK_M,BLOCK_N"):
            parse(bad)
