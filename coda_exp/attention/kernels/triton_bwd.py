"""Flash-CoDA's fused backward: one Triton kernel, ``_bwd_kernel``, instead of ``triton_jit``'s ``_dkdv_kernel`` +
``_dq_kernel`` (host side and the switch between them: ``flash_triton``; the algorithm: ``triton_jit``'s docstring).

FlashAttention-2's backward shape: grid (B·H, cdiv(Lk, BLOCK_N)); a program owns BLOCK_N keys and loops over the
query blocks that see them (``causal``: from the first one), recomputing each (BLOCK_M, BLOCK_N) tile once with the
shared helpers (``_key_block_tile``, as in ``_dkdv_kernel``): dv += P^T dout and dk += dE^T q in registers, dq += dE k added
into a float buffer (B, H, Lq, de) in the accumulation dtype with ``tl.atomic_add``. The L1 gradients share one
sign pattern per pair and feature: dnq_i = Σ_j G_ij sign(nq_i - nk_j) (atomically added, into the dq buffer with
``shared_n``), dnk_j = -Σ_i G_ij sign(nq_i - nk_j) (into the program's own scratch rows, no atomics, as in
``_dkdv_kernel``; with ``shared_n`` it joins dk at the end). The split kernels each recompute every pair's distance
and activations and do one side's sums; here both sides come from one pass.

Both sums from one (DC, pair) register tile need each thread to hold a block of queries *and* of keys (the split
kernels' (DC, BLOCK_M, BLOCK_N) tiles put one key per thread: fine for a sum over queries, shuffles for every value
of a sum over keys). So ``_sign_pairs`` indexes the pairs of a tile as (RM, RN, TM, TN) with i = rm TM + tm,
j = rn TN + tn, TM = TN = 8 (two warps' lanes), and gives each of the W = num_warps / 2 pairs of warps its own SC =
SIGN_DC features of every chunk: (RM, RN, SC, W, TM, TN) tiles (``flash_triton._lanes``). Triton's default
layout spreads the lanes over TM and TN and the warps over W and TM, and leaves each thread an RM × RN × SC block:
both sums are in-thread adds, then shuffles over 8 lanes (dnq) or over 4 lanes and the two warps of a pair (dnk,
through shared memory); a thread holds W times more pairs than with every warp on the pairs (the layout before), so
there are W times fewer partial sums to shuffle. The sign costs a subtraction and one saturated FMA per pair and
feature (``_step``: the sums are 2 Σ g step - Σ g). 16-bit inputs' float16 L1 operands (``triton_args._l1_args``) take
the weighted steps and the in-thread sums in float16, two features to an instruction (``_weighted_steps``: inline
PTX when compiled; the interpreter runs the same operations in Triton's float16). Under the interpreter any TM, TN
dividing the blocks and any W are correct (the layout only matters for speed).

sm_90, bfloat16, d 64, shared N, 128 × 64 tiles, 8 warps (``scripts/sass_flash_kernels.py``, Triton 3.6): per pair
and feature ~2.8 SASS instructions for the distance, ~6.2 for both sign sums, ~1.4 for the rest of the tile: ~10.3
(~12.5 with every warp on the pairs), against ~7.4 for each split kernel. With the sign sums in float16 (64 × 64,
4 warps, PF 2): 5.5 against 7.1 for them, 9.4 against 10.9 in all; 8.6 at DC 8 (the distance's chunks: the sign sums
take SIGN_DC features whatever DC), 7.65 at 128 × 64, 8 warps, DC 8
(``results/bench/sass_sm90_triton36_half_sign.json``). Not yet timed on a GPU.
"""

# Features per pair of warps in each step of the sign sums (_sign_pairs), whatever a config's DC (the distance's
# chunks): one packed float16 pair. sm_90 SASS, bf16, 64 x 64, PF 2: the sign loop builds 5.5 instructions per pair
# and feature with 2, 6.1 with 4; the kernel 8.6 with DC 8 for the distance.
SIGN_DC = 2

try:  # triton is optional (Linux x86-64 dev extra): without it this module defines no kernels
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only on installs without triton
    HAVE_TRITON = False

if HAVE_TRITON:
    # the shared helpers; an interpreted copy of this module imports interpreted copies of them
    # (flash_triton._interpreted_copy)
    from coda_exp.attention.kernels.triton_jit import (
        _SUM_COMBINE,
        _first_query,
        _key_block_tile,
        _rows,
        _slice,
        _store_rows,
    )
    from coda_exp.attention.kernels.triton_math import _step

    _SIGN_DC = tl.constexpr(SIGN_DC)
    _MAX_COMBINE = tl.standard._elementwise_max  # (tl.max is a @jit function: the interpreter knows this combine)

    @triton.jit
    def _grid_cols(P, rows, ok, c0, DN: tl.constexpr, DC: tl.constexpr, W: tl.constexpr, LDT: tl.constexpr):
        """Features c0 + w DC + dc (w < W, dc < DC) of the (R, T) grid of rows ``rows``: an (R, DC, W, T) chunk in
        LDT, zero-padded."""
        offs_c = c0 + tl.arange(0, W)[None, None, :, None] * DC + tl.arange(0, DC)[None, :, None, None]
        return tl.load(P + offs_c + (rows * DN)[:, None, None, :], mask=(offs_c < DN) & ok[:, None, None, :],
                       other=0.0).to(LDT)

    @triton.jit
    def _half_scale(g):
        """A power of two s that brings max |g| of the tile to [1/2, 1) (2^126 for a tile of zeros; inf and NaN
        stay): g s in float16 keeps 11 significant bits of every value down to 2^-15 of the largest (smaller ones
        fewer, as subnormals; below 2^-25 of it, none: 0)."""
        top = tl.reduce(tl.reduce(tl.abs(g), 1, _MAX_COMBINE), 0, _MAX_COMBINE)
        e = (top.to(tl.int32, bitcast=True) >> 23) & 0xFF  # the biased exponent of max |g|
        return (tl.minimum(tl.maximum(253 - e, 1), 253) << 23).to(tl.float32, bitcast=True)  # 2^(126 - (e - 127))

    @triton.jit
    def _weighted_steps(a, b, g, CDT: tl.constexpr, ASM: tl.constexpr):
        """g step(a - b) (``_step``). float16 a, b, g: clamp((a - b) 2^15 + 1/2, 0, 1) g in float16, exact for
        a - b = 0 (1/2) and |a - b| >= 2^-16 (0 or 1); between them (2^-27 of the largest |a|, |b|, 2048) a step
        between 0 and 1. ``ASM`` (compiled for a GPU): packed PTX, two pairs per instruction, a subtraction, a
        saturated FMA and a product (sm_90: HADD2, HFMA2.SAT, HMUL2), in place of Triton's float16 arithmetic,
        which packs them along the keys and clamps with two more instructions (the interpreter runs that)."""
        if a.dtype == tl.float16:
            if ASM:
                t = tl.inline_asm_elementwise(
                    "{.reg .b32 d, s, m, h; mov.b32 m, 0x78007800; mov.b32 h, 0x38003800; sub.rn.f16x2 d, $1, $2; "
                    "fma.rn.sat.f16x2 s, d, m, h; mul.rn.f16x2 $0, s, $3;}",  # m = (2^15, 2^15), h = (1/2, 1/2)
                    "=r,r,r,r", [a, b, g], dtype=tl.float16, is_pure=True, pack=2)
            else:
                zero = tl.full((), 0.0, tl.float16)  # float16 bounds: with Python floats the clamp is in float32
                t = tl.minimum(tl.maximum((a - b) * 32768.0 + 0.5, zero), zero + 1.0) * g
        else:
            t = _step(a - b, CDT) * g
        return t

    @triton.jit
    def _sign_pairs(NQ, NK, DNQ, SCR, start_m, start_n, LQ, LK, g, DN: tl.constexpr, SC: tl.constexpr,
                    CDT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    TM: tl.constexpr, TN: tl.constexpr, W: tl.constexpr, ASM: tl.constexpr):
        """DNQ[i] += Σ_j g_ij sign(nq_i - nk_j) (atomics) and SCR[j] -= Σ_i g_ij sign(nq_i - nk_j) (the program's
        rows) for the tile's queries start_m + i, keys start_n + j, W SC features at a time (loaded as they are
        summed: prefetching them, as PF does for the distance, adds spills and instructions on sm_90):
        with s = (1 + sign) / 2 (``_step``), Σ_j g sign = 2 Σ_j s g - Σ_j g (the last per tile, not per feature).
        The pairs are indexed (RM, RN, TM, TN), i = rm TM + tm, j = rn TN + tn, and the W groups of warps take
        W sets of SC features: (RM, RN, SC, W, TM, TN) tiles, the features last of a thread's own axes (RM, RN,
        SC), so that float16 values pair along them.

        float16 nq, nk (16-bit inputs, ``triton_args._l1_args``): g scaled by a power of two per tile
        (``_half_scale``), the weighted steps in float16 (``_weighted_steps``) and each thread's sums over its RN
        keys (dnq) or RM queries (dnk) too, packed along the features (<= 8 terms of |x| < 1, 2^-11 relative per
        add), then in CDT over the lanes, unscaled. sm_90 SASS (Triton 3.6, bf16, 64 x 64 PF 2): 5.5 instructions
        per pair and feature for this loop against 7.1 in float32, 9.4 for the kernel against 10.9."""
        RM: tl.constexpr = BLOCK_M // TM
        RN: tl.constexpr = BLOCK_N // TN
        rows = start_m + tl.arange(0, RM)[:, None] * TM + tl.arange(0, TM)[None, :]  # (RM, TM): i = rm TM + tm
        cols = start_n + tl.arange(0, RN)[:, None] * TN + tl.arange(0, TN)[None, :]
        rows_ok = rows < LQ
        cols_ok = cols < LK
        g4 = tl.permute(tl.reshape(g, (RM, TM, RN, TN)), (0, 2, 1, 3))  # (RM, RN, TM, TN)
        g_q = tl.reduce(tl.reduce(g4, 1, _SUM_COMBINE), 2, _SUM_COMBINE)[:, None, None, :]  # Σ_j g: (RM, 1, 1, TM)
        g_k = tl.reduce(tl.reduce(g4, 0, _SUM_COMBINE), 1, _SUM_COMBINE)[:, None, None, :]  # Σ_i g: (RN, 1, 1, TN)
        if NQ.dtype.element_ty == tl.float16:
            scale = _half_scale(g)
            gt = (g4 * scale).to(tl.float16)[:, :, None, None, :, :]
            LDT: tl.constexpr = tl.float16
        else:
            scale = 1.0
            gt = g4[:, :, None, None, :, :]  # every group of warps holds the whole tile
            LDT: tl.constexpr = CDT
        unscale = 2.0 / scale
        for c0 in range(0, DN, SC * W):
            a = _grid_cols(NQ, rows, rows_ok, c0, DN, SC, W, LDT)  # (RM, SC, W, TM)
            b = _grid_cols(NK, cols, cols_ok, c0, DN, SC, W, LDT)  # (RN, SC, W, TN)
            t = _weighted_steps(a[:, None, :, :, :, None], b[None, :, :, :, None, :], gt, CDT, ASM)
            # in-thread axes first (RN, RM), then the lanes (TN, TM)
            dq = unscale * tl.reduce(tl.reduce(t, 1, _SUM_COMBINE).to(CDT), 4, _SUM_COMBINE) - g_q  # (RM, SC, W, TM)
            dk = unscale * tl.reduce(tl.reduce(t, 0, _SUM_COMBINE).to(CDT), 3, _SUM_COMBINE) - g_k  # (RN, SC, W, TN)
            offs_c = c0 + tl.arange(0, W)[None, None, :, None] * SC + tl.arange(0, SC)[None, :, None, None]
            tl.atomic_add(DNQ + offs_c + (rows * DN)[:, None, None, :], dq,
                          mask=(offs_c < DN) & rows_ok[:, None, None, :], sem="relaxed")
            ptrs = SCR + offs_c + (cols * DN)[:, None, None, :]
            ok = (offs_c < DN) & cols_ok[:, None, None, :]
            tl.store(ptrs, tl.load(ptrs, mask=ok, other=0.0) - dk, mask=ok)

    @triton.jit(do_not_specialize=["drop_thr"])
    def _bwd_kernel(Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, DQ, DK, DV_OUT, DNQ, SCR,
                    H, LQ, LK, smb, smh, smi, smj, sqb, sqh, sqi, drop_thr, LQ_BUCKET, LK_BUCKET,
                    DE: tl.constexpr, DN: tl.constexpr, DV: tl.constexpr, DE_P: tl.constexpr,
                    DN_P: tl.constexpr, DV_P: tl.constexpr, E_FN: tl.constexpr, N_FN: tl.constexpr,
                    HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr, CAUSAL: tl.constexpr,
                    DROPOUT: tl.constexpr, SHARED: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, CENTER_E: tl.constexpr, CENTER_N: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr,
                    TM: tl.constexpr, TN: tl.constexpr, W: tl.constexpr):
        """dk, dv (and dnk into SCR) of BLOCK_N keys; dq and dnq added into the zeroed DQ, DNQ (CDT) buffers (with
        ``SHARED`` the host passes DQ as DNQ)."""
        s = tl.program_id(0)
        pid_n = tl.program_id(1)
        s64 = s.to(tl.int64)
        Q, K, V, NQ, NK, CENT, DOUT, MASK, QMASK, alpha, beta, gate, scale, inv_w, seed = _slice(
            s, H, Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, LQ, LK, smb, smh, sqb, sqh, DE, DN, DV)
        DQ += s64 * LQ * DE
        DNQ += s64 * LQ * DN
        SCR += s64 * LK * DN
        start_n = pid_n * BLOCK_N
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < LK
        _store_rows(SCR, offs_n, n_ok, tl.full((BLOCK_N, DN_P), 0.0, dtype=CDT), DN, DN_P)  # this program's dnk
        tl.debug_barrier()
        k = _rows(K, offs_n, n_ok, DE, DE_P)
        v = _rows(V, offs_n, n_ok, DV, DV_P)
        dk = tl.full((BLOCK_N, DE_P), 0.0, dtype=CDT)
        dv = tl.full((BLOCK_N, DV_P), 0.0, dtype=CDT)
        offs_e = tl.arange(0, DE_P)
        for start_m in range(_first_query(start_n, LQ, LK, BLOCK_M, CAUSAL), LQ, BLOCK_M):
            offs_m, m_ok, de, g, dk, dv = _key_block_tile(
                Q, DOUT, NQ, NK, MASK, QMASK, CENT, k, v, dk, dv, s, start_m, offs_n, n_ok, LQ, LK, smi, smj, sqi,
                seed, drop_thr, alpha, beta, gate, scale, DE, DN, DV, DE_P, DV_P, DC, PF, E_FN, N_FN, HAS_MASK,
                HAS_QMASK, CAUSAL, DROPOUT, CDT, FAST, DOT_PREC, CENTER_E, CENTER_N, BLOCK_M, BLOCK_N)
            dq = tl.dot(de.to(k.dtype), k, out_dtype=CDT, input_precision=DOT_PREC)
            tl.atomic_add(DQ + offs_m[:, None] * DE + offs_e[None, :], dq,
                          mask=m_ok[:, None] & (offs_e < DE)[None, :], sem="relaxed")
            _sign_pairs(NQ, NK, DNQ, SCR, start_m, start_n, LQ, LK, g * inv_w, DN, _SIGN_DC, CDT, BLOCK_M, BLOCK_N,
                        TM, TN, W, FAST)
            tl.debug_barrier()
        if SHARED:  # nk is k: the L1 gradient joins dk (DN_P == DE_P)
            dk += _rows(SCR, offs_n, n_ok, DN, DN_P)
        _store_rows(DK + s64 * LK * DE, offs_n, n_ok, dk, DE, DE_P)
        _store_rows(DV_OUT + s64 * LK * DV, offs_n, n_ok, dv, DV, DV_P)

    _INTERPRETED = not isinstance(_bwd_kernel, triton.runtime.JITFunction)
