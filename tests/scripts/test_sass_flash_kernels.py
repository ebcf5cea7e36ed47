"""scripts/sass_flash_kernels.py: its loop finder on a made-up listing, and (slow) one real sm_90 build (no GPU
needed)."""

from __future__ import annotations

import pytest

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   FADD R2, R2, R3 ;
.L_x_1:
        /*0020*/                   FADD R4, R4, R5 ;
        /*0030*/                   FFMA.SAT R4, R4, R6, 0.5 ;
        /*0040*/              @P0  BRA `(.L_x_1) ;
        /*0050*/                   FMUL R2, R2, R2 ;
        /*0060*/              @!P1 BRA `(.L_x_0) ;
        /*0070*/                   EXIT ;
"""


def test_loops_are_backward_branches(load_script):
    script = load_script("sass_flash_kernels")
    found = script.loops(LISTING)
    assert [(a, b) for a, b, _ in found] == [(1, 6), (2, 4)]
    assert found[1][2] == {"FADD": 1, "FFMA": 1, "BRA": 1}


@pytest.mark.slow
def test_a_kernel_builds_for_sm90(load_script):
    from coda_exp.attention.kernels import flash_triton as ft

    if ft.triton_jit._INTERPRETED:
        pytest.skip("this process imported the kernels under TRITON_INTERPRET=1")
    row = load_script("sass_flash_kernels").build("fwd", "bf16", True, (32, 32, 2, 0, 4, 1))
    assert 0 < row["registers"] <= 255 and row["spill_bytes"] is not None
    assert len(row["chunk_loops"]) == 1 and 1.5 < row["chunk_loops"][0] < 20 and row["total"] > row["tile"] > 0


@pytest.mark.slow
def test_the_fused_backwards_float16_sign_loop_is_packed_ptx(load_script):
    """16-bit inputs' sign sums (``triton_bwd._weighted_steps``, compiled: inline PTX): the loop's steps are saturated
    packed FMAs (HFMA2.SAT), its products packed (HMUL2), no clamp left (HMNMX2: Triton's own float16 code)."""
    from coda_exp.attention.kernels import flash_triton as ft

    if ft.triton_jit._INTERPRETED:
        pytest.skip("this process imported the kernels under TRITON_INTERPRET=1")
    row = load_script("sass_flash_kernels").build("bwd", "bf16", True, (64, 64, 2, 2, 4, 2))
    sign_loop = row["chunk_loop_ops"][-1]
    assert sign_loop.get("HFMA2", 0) > 0 and sign_loop.get("HMUL2", 0) > 0 and "HMNMX2" not in sign_loop
