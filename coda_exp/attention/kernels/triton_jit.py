"""The Triton kernels of Flash-CoDA (host side, contract and checks: ``flash_triton``; contract: ``flash_spec``).

Per (batch, head) slice s = b·H + h, M_ij = f_E(alpha q_i·k_j) · gate · f_N(-beta ||nq_i - nk_j||_1), invalid pairs
(``mask``, ``query_mask``, causal limit j <= i + Lk - Lq) are 0, dropout keeps pair (s, i, j) iff
``hash32(seed, s, i, j) >> 8 >= ceil(p · 2^24)`` (``flash_spec.dropout_keep`` in integers) and scales kept values by
1 / (1 - p). Nothing of size Lq × Lk is ever allocated; M lives one (BLOCK_M, BLOCK_N) tile at a time in registers.

* ``_fwd_kernel`` (grid (B·H, cdiv(Lq, BLOCK_M))) owns BLOCK_M query rows, loops over key blocks (with ``causal``
  up to the last key its rows see): E = alpha q k^T by ``tl.dot``; the L1 distance DC features at a time
  (``_l1_tile``: (DC, BLOCK_M, BLOCK_N) register tiles summed over their first axis, inside each thread);
  activations, gate, validity, dropout; acc += M V by ``tl.dot``.
* Backward, FlashAttention-2 style, recomputing each tile (no softmax: no row statistics; ``_pair_grads``):
  dM = (dout v^T) ⊙ keep ⊙ valid / (1 - p), dE = dM f_E' gate f_N alpha, G = dM f_E gate f_N' (-beta).
  ``_dkdv_kernel`` (over key blocks): dv += P^T dout, dk += dE^T q; ``_dq_kernel`` (over query blocks): dq += dE k.
  The L1 gradients dnk_j = -Σ_i G_ij sign(nq_i - nk_j), dnq_i = Σ_j G_ij sign(nq_i - nk_j) (sign(0) = 0) go DC
  features at a time (``_sign_cols``) into a scratch (B, H, L, dn) whose rows the program owns (no atomics; a
  barrier orders the tiles); with ``shared_n`` it joins dq / dk at the end, otherwise it is dnq / dnk.
* Dropout is regenerated, never stored: all kernels evaluate the same counter-based hash of (seed, s, i, j).

Precision: float16 / bfloat16 inputs are computed and accumulated in float32 (tiles are cast to the input dtype
only as ``tl.dot`` operands, as in FlashAttention), with tanh and sigmoid by the GPU's ``tanh.approx`` (``FAST``:
2^-11 relative, below 16-bit rounding); float32 in float32 (``tl.dot`` in TF32, or three TF32 products where
``torch.get_float32_matmul_precision()`` is "highest"; divisions by ``div.full``, 2 ulp); float64 entirely in
float64. Scalars (alpha, beta, gate, 1 / (1 - p)) arrive in a small tensor in the accumulation dtype. tanh and
arctan are written out (Cephes' rational forms; tanh from |x| 0.625 up by exp: ~1-2 ulp, ``triton_math``).

Only triton.language builtins are called, so ``flash_triton`` can load an interpreted copy for CPU tensors.
"""

try:  # triton is optional (Linux x86-64 dev extra): without it this module defines no kernels
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only on installs without triton
    HAVE_TRITON = False

if HAVE_TRITON:
    # helpers (an interpreted copy of this module imports interpreted ones: flash_triton._interpreted_copy); only
    # tl *builtins* are called (tl.sum, zeros, sigmoid, cdiv are @jit functions): tl.reduce with _SUM_COMBINE
    from coda_exp.attention.kernels.triton_math import (
        _SUM_COMBINE,
        _act,
        _act_grad,
        _cols,
        _keep,
        _l1_tile,
        _step,
        _valid,
    )

    # ------------------------------------------------------------------ tiles
    @triton.jit
    def _slice(s, H, Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, ROWS, LQ, LK, smb, smh, sqb, sqh,
               DE: tl.constexpr, DN: tl.constexpr, DV: tl.constexpr):
        """Slice s = b H + h: the bases of its q, k, v, nq, nk, centring table and ROWS (an (Lq, dv) tensor: the
        forward's output, a backward's dout), of its masks, the scalars (alpha, beta w, gate, 1 / (1 - p), 1 / w)
        and the dropout seed (uint32). What a kernel does not use is never computed. w: the scale of the L1
        distances (``triton_args._l1_args``: nq, nk given divided by w, a power of two; else 1), so the distances
        are D / w, beta w makes N what it is, and their gradients G are dL/d(D / w): the sign sums take G / w."""
        s64 = s.to(tl.int64)
        MASK += (s // H).to(tl.int64) * smb + (s % H).to(tl.int64) * smh
        QMASK += (s // H).to(tl.int64) * sqb + (s % H).to(tl.int64) * sqh
        return (Q + s64 * LQ * DE, K + s64 * LK * DE, V + s64 * LK * DV, NQ + s64 * LQ * DN, NK + s64 * LK * DN,
                CENT + s64 * LQ * 4, ROWS + s64 * LQ * DV, MASK, QMASK, tl.load(SCAL),
                tl.load(SCAL + 1) / tl.load(SCAL + 4), tl.load(SCAL + 2), tl.load(SCAL + 3), tl.load(SCAL + 4),
                tl.load(SEED).to(tl.uint32))

    @triton.jit
    def _rows(P, offs, ok, D: tl.constexpr, D_P: tl.constexpr):
        """The (len(offs), D_P) tile of rows ``offs`` of a row-major (L, D) slice, zero-padded."""
        offs_d = tl.arange(0, D_P)
        return tl.load(P + offs[:, None] * D + offs_d[None, :], mask=ok[:, None] & (offs_d < D)[None, :], other=0.0)

    @triton.jit
    def _store_rows(P, offs, ok, x, D: tl.constexpr, D_P: tl.constexpr):
        offs_d = tl.arange(0, D_P)
        tl.store(P + offs[:, None] * D + offs_d[None, :], x.to(P.dtype.element_ty),
                 mask=ok[:, None] & (offs_d < D)[None, :])

    @triton.jit
    def _sign_cols(OWN, OTHER, SCR, offs_own, offs_other, own_ok, other_ok, g,
                   DN: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr, CDT: tl.constexpr):
        """SCR[own] -= Σ_other g ⊙ sign(n_other - n_own), sign(0) = 0, DC features at a time (PF as in _l1_tile);
        ``g`` is (len(offs_other), len(offs_own)). The program owns its SCR rows; a barrier orders the tiles.
        Σ g sign(d) = 2 Σ g step(d) - Σ g: one saturated FMA per pair and feature for the sign (``_step``; two
        compares and two selects before: sm_90 SASS per pair and feature 9.15 -> 7.65 in each backward kernel)."""
        g3 = g[None, :, :]
        gsum = tl.reduce(g, 0, _SUM_COMBINE)[None, :]  # Σ_other g, the same for every feature
        if PF:
            own = _cols(OWN, offs_own, own_ok, 0, DN, DC, CDT)
            other = _cols(OTHER, offs_other, other_ok, 0, DN, DC, CDT)
        for c0 in range(0, DN, DC):
            if PF:
                own_c, other_c = own, other
                own = _cols(OWN, offs_own, own_ok, c0 + DC, DN, DC, CDT)
                other = _cols(OTHER, offs_other, other_ok, c0 + DC, DN, DC, CDT)
            else:
                own_c = _cols(OWN, offs_own, own_ok, c0, DN, DC, CDT)
                other_c = _cols(OTHER, offs_other, other_ok, c0, DN, DC, CDT)
            d = other_c[:, :, None] - own_c[:, None, :]
            col = 2.0 * tl.reduce(g3 * _step(d, CDT), 1, _SUM_COMBINE) - gsum
            offs_c = c0 + tl.arange(0, DC)
            ptrs = SCR + offs_c[:, None] + (offs_own * DN)[None, :]
            ok = (offs_c < DN)[:, None] & own_ok[None, :]
            tl.store(ptrs, tl.load(ptrs, mask=ok, other=0.0) - col, mask=ok)

    @triton.jit
    def _centres(CENT, offs_m, m_ok, COL: tl.constexpr, ON: tl.constexpr):
        """Column COL of the per-row centring table (Lq, 4): mean E, mean D, mean dE, mean G (``flash_triton``),
        as a (rows, 1) column; 0.0 when not ON (x - 0.0 folds away)."""
        if ON:
            c = tl.load(CENT + offs_m * 4 + COL, mask=m_ok, other=0.0)[:, None]
        else:
            c = 0.0
        return c

    @triton.jit
    def _m_tile(q, k, NQ, NK, offs_m, offs_n, m_ok, n_ok, alpha, beta, gate, ce, cd,
                DN: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr, E_FN: tl.constexpr, N_FN: tl.constexpr,
                CDT: tl.constexpr, FAST: tl.constexpr, DOT_PREC: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):
        """M = f_E(alpha E) gate f_N(N) of one tile (unmasked). The L1 part first: fewer tiles live at once."""
        nv = -beta * (_l1_tile(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN, DC, PF, CDT, BLOCK_M, BLOCK_N) - cd)
        fn = gate * _act(nv, N_FN, CDT, FAST)
        ev = alpha * tl.dot(q, tl.trans(k), out_dtype=CDT, input_precision=DOT_PREC) - ce
        return _act(ev, E_FN, CDT, FAST) * fn

    @triton.jit
    def _m_tile_grad(q, k, NQ, NK, offs_m, offs_n, m_ok, n_ok, alpha, beta, gate, ce, cd,
                     DN: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr, E_FN: tl.constexpr,
                     N_FN: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr, DOT_PREC: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """(M, dM/d(q·k), dM/dD) of one tile (unmasked), D the L1 distance."""
        nv = -beta * (_l1_tile(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN, DC, PF, CDT, BLOCK_M, BLOCK_N) - cd)
        fn = _act(nv, N_FN, CDT, FAST)
        dfn = _act_grad(nv, fn, N_FN, CDT) * (-beta * gate)
        fn = fn * gate
        ev = alpha * tl.dot(q, tl.trans(k), out_dtype=CDT, input_precision=DOT_PREC) - ce
        fe = _act(ev, E_FN, CDT, FAST)
        return fe * fn, _act_grad(ev, fe, E_FN, CDT) * (alpha * fn), fe * dfn

    # ------------------------------------------------------------------ kernels
    @triton.jit(do_not_specialize=["drop_thr"])
    def _fwd_kernel(Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, OUT,
                    H, LQ, LK, smb, smh, smi, smj, sqb, sqh, sqi, drop_thr, LQ_BUCKET, LK_BUCKET,
                    DE: tl.constexpr, DN: tl.constexpr, DV: tl.constexpr, DE_P: tl.constexpr, DV_P: tl.constexpr,
                    E_FN: tl.constexpr, N_FN: tl.constexpr, HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr,
                    CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr,
                    DOT_PREC: tl.constexpr, CENTER_E: tl.constexpr, CENTER_N: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr):
        s = tl.program_id(0)
        pid_m = tl.program_id(1)
        Q, K, V, NQ, NK, CENT, OUT, MASK, QMASK, alpha, beta, gate, scale, _inv_w, seed = _slice(
            s, H, Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, OUT, LQ, LK, smb, smh, sqb, sqh, DE, DN, DV)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < LQ
        q = _rows(Q, offs_m, m_ok, DE, DE_P)
        ce = _centres(CENT, offs_m, m_ok, 0, CENTER_E)
        cd = _centres(CENT, offs_m, m_ok, 1, CENTER_N)
        acc = tl.full((BLOCK_M, DV_P), 0.0, dtype=CDT)
        hi = LK
        if CAUSAL:  # last key any row of this block sees: (pid_m + 1) BLOCK_M - 1 + LK - LQ
            hi = tl.minimum(LK, (pid_m + 1) * BLOCK_M + LK - LQ)
        for start_n in range(0, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_ok = offs_n < LK
            k = _rows(K, offs_n, n_ok, DE, DE_P)
            v = _rows(V, offs_n, n_ok, DV, DV_P)
            m = _m_tile(q, k, NQ, NK, offs_m, offs_n, m_ok, n_ok, alpha, beta, gate, ce, cd,
                        DN, DC, PF, E_FN, N_FN, CDT, FAST, DOT_PREC, BLOCK_M, BLOCK_N)
            ok = _valid(MASK, QMASK, offs_m, offs_n, LQ, LK, smi, smj, sqi, HAS_MASK, HAS_QMASK, CAUSAL)
            if DROPOUT:
                ok = ok & _keep(seed, s, offs_m, offs_n, drop_thr)
                m = m * scale
            m = tl.where(ok, m, 0.0)
            acc = tl.dot(m.to(v.dtype), v, acc, out_dtype=CDT, input_precision=DOT_PREC)
        _store_rows(OUT, offs_m, m_ok, acc, DV, DV_P)

    @triton.jit
    def _pair_grads(q, k, v, do, NQ, NK, MASK, QMASK, s, offs_m, offs_n, m_ok, n_ok, LQ, LK,
                    smi, smj, sqi, seed, drop_thr, alpha, beta, gate, scale, ce, cd,
                    DN: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr, E_FN: tl.constexpr, N_FN: tl.constexpr,
                    HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr, CAUSAL: tl.constexpr,
                    DROPOUT: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr, DOT_PREC: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """One backward tile: (P = dropout(M) valid, dE = dL/d(q·k), G = dL/dD, valid) with dM = dout v^T, E and D
        centred by ce, cd (0.0: not centred); valid: the pairs that count, dropout aside."""
        m, dm_de, dm_dd = _m_tile_grad(q, k, NQ, NK, offs_m, offs_n, m_ok, n_ok, alpha, beta, gate, ce, cd,
                                       DN, DC, PF, E_FN, N_FN, CDT, FAST, DOT_PREC, BLOCK_M, BLOCK_N)
        valid = _valid(MASK, QMASK, offs_m, offs_n, LQ, LK, smi, smj, sqi, HAS_MASK, HAS_QMASK, CAUSAL)
        ok = valid
        if DROPOUT:
            ok = ok & _keep(seed, s, offs_m, offs_n, drop_thr)
        dm = tl.dot(do, tl.trans(v), out_dtype=CDT, input_precision=DOT_PREC)
        dm = tl.where(ok, dm * scale, 0.0)
        return tl.where(ok, m * scale, 0.0), dm * dm_de, dm * dm_dd, valid

    @triton.jit
    def _centred_grads(de, g, valid, CENT, offs_m, m_ok, CENTER_E: tl.constexpr, CENTER_N: tl.constexpr):
        """A centred E or D: its pairs' gradients minus their mean over the row's (slice's) valid pairs."""
        if CENTER_E:
            de = tl.where(valid, de - _centres(CENT, offs_m, m_ok, 2, CENTER_E), 0.0)
        if CENTER_N:
            g = tl.where(valid, g - _centres(CENT, offs_m, m_ok, 3, CENTER_N), 0.0)
        return de, g

    @triton.jit
    def _first_query(start_n, LQ, LK, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
        """The first query block a key block from start_n meets: 0, or with ``causal`` the block of the first query
        that sees key start_n (i >= j - (LK - LQ))."""
        lo = 0
        if CAUSAL:
            lo = tl.maximum(start_n - (LK - LQ), 0)
            lo = (lo // BLOCK_M) * BLOCK_M
        return lo

    @triton.jit
    def _key_block_tile(Q, DOUT, NQ, NK, MASK, QMASK, CENT, k, v, dk, dv, s, start_m, offs_n, n_ok, LQ, LK,
                        smi, smj, sqi, seed, drop_thr, alpha, beta, gate, scale,
                        DE: tl.constexpr, DN: tl.constexpr, DV: tl.constexpr, DE_P: tl.constexpr,
                        DV_P: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr, E_FN: tl.constexpr,
                        N_FN: tl.constexpr, HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr, CAUSAL: tl.constexpr,
                        DROPOUT: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr, DOT_PREC: tl.constexpr,
                        CENTER_E: tl.constexpr, CENTER_N: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
        """A key block's tile with the queries start_m ... (``_dkdv_kernel``, ``triton_bwd._bwd_kernel``): the tile's
        gradients recomputed (``_pair_grads``, centred), dv += P^T dout and dk += dE^T q; returns (offs_m, m_ok, dE,
        G, dk, dv), dE and G for what the caller adds (dq, the L1 gradients)."""
        offs_m = start_m + tl.arange(0, BLOCK_M)
        m_ok = offs_m < LQ
        q = _rows(Q, offs_m, m_ok, DE, DE_P)
        do = _rows(DOUT, offs_m, m_ok, DV, DV_P)
        ce = _centres(CENT, offs_m, m_ok, 0, CENTER_E)
        cd = _centres(CENT, offs_m, m_ok, 1, CENTER_N)
        p, de, g, valid = _pair_grads(q, k, v, do, NQ, NK, MASK, QMASK, s, offs_m, offs_n, m_ok, n_ok, LQ, LK,
                                      smi, smj, sqi, seed, drop_thr, alpha, beta, gate, scale, ce, cd, DN, DC,
                                      PF, E_FN, N_FN, HAS_MASK, HAS_QMASK, CAUSAL, DROPOUT, CDT, FAST, DOT_PREC,
                                      BLOCK_M, BLOCK_N)
        de, g = _centred_grads(de, g, valid, CENT, offs_m, m_ok, CENTER_E, CENTER_N)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv, out_dtype=CDT, input_precision=DOT_PREC)
        dk = tl.dot(tl.trans(de.to(q.dtype)), q, dk, out_dtype=CDT, input_precision=DOT_PREC)
        return offs_m, m_ok, de, g, dk, dv

    @triton.jit(do_not_specialize=["drop_thr"])
    def _dkdv_kernel(Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, DK, DV_OUT, SCR,
                     H, LQ, LK, smb, smh, smi, smj, sqb, sqh, sqi, drop_thr, LQ_BUCKET, LK_BUCKET,
                     DE: tl.constexpr, DN: tl.constexpr, DV: tl.constexpr, DE_P: tl.constexpr,
                     DN_P: tl.constexpr, DV_P: tl.constexpr, E_FN: tl.constexpr, N_FN: tl.constexpr,
                     HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr, CAUSAL: tl.constexpr,
                     DROPOUT: tl.constexpr, SHARED: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr,
                     DOT_PREC: tl.constexpr, CENTER_E: tl.constexpr, CENTER_N: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr):
        s = tl.program_id(0)
        pid_n = tl.program_id(1)
        s64 = s.to(tl.int64)
        Q, K, V, NQ, NK, CENT, DOUT, MASK, QMASK, alpha, beta, gate, scale, inv_w, seed = _slice(
            s, H, Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, LQ, LK, smb, smh, sqb, sqh, DE, DN, DV)
        SCR += s64 * LK * DN
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < LK
        _store_rows(SCR, offs_n, n_ok, tl.full((BLOCK_N, DN_P), 0.0, dtype=CDT), DN, DN_P)  # this program's dnk
        tl.debug_barrier()
        k = _rows(K, offs_n, n_ok, DE, DE_P)
        v = _rows(V, offs_n, n_ok, DV, DV_P)
        dk = tl.full((BLOCK_N, DE_P), 0.0, dtype=CDT)
        dv = tl.full((BLOCK_N, DV_P), 0.0, dtype=CDT)
        for start_m in range(_first_query(pid_n * BLOCK_N, LQ, LK, BLOCK_M, CAUSAL), LQ, BLOCK_M):
            offs_m, m_ok, _, g, dk, dv = _key_block_tile(
                Q, DOUT, NQ, NK, MASK, QMASK, CENT, k, v, dk, dv, s, start_m, offs_n, n_ok, LQ, LK, smi, smj, sqi,
                seed, drop_thr, alpha, beta, gate, scale, DE, DN, DV, DE_P, DV_P, DC, PF, E_FN, N_FN, HAS_MASK,
                HAS_QMASK, CAUSAL, DROPOUT, CDT, FAST, DOT_PREC, CENTER_E, CENTER_N, BLOCK_M, BLOCK_N)
            _sign_cols(NK, NQ, SCR, offs_n, offs_m, n_ok, m_ok, g * inv_w, DN, DC, PF, CDT)  # dnk -= Σ_i G sign(..)
            tl.debug_barrier()
        if SHARED:  # nk is k: the L1 gradient joins dk (DN_P == DE_P)
            dk += _rows(SCR, offs_n, n_ok, DN, DN_P)
        _store_rows(DK + s64 * LK * DE, offs_n, n_ok, dk, DE, DE_P)
        _store_rows(DV_OUT + s64 * LK * DV, offs_n, n_ok, dv, DV, DV_P)

    @triton.jit(do_not_specialize=["drop_thr"])
    def _dq_kernel(Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, DQ, SCR,
                   H, LQ, LK, smb, smh, smi, smj, sqb, sqh, sqi, drop_thr, LQ_BUCKET, LK_BUCKET,
                   DE: tl.constexpr, DN: tl.constexpr, DV: tl.constexpr, DE_P: tl.constexpr,
                   DN_P: tl.constexpr, DV_P: tl.constexpr, E_FN: tl.constexpr, N_FN: tl.constexpr,
                   HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr, CAUSAL: tl.constexpr,
                   DROPOUT: tl.constexpr, SHARED: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr,
                   DOT_PREC: tl.constexpr, CENTER_E: tl.constexpr, CENTER_N: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr):
        s = tl.program_id(0)
        pid_m = tl.program_id(1)
        s64 = s.to(tl.int64)
        Q, K, V, NQ, NK, CENT, DOUT, MASK, QMASK, alpha, beta, gate, scale, inv_w, seed = _slice(
            s, H, Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, LQ, LK, smb, smh, sqb, sqh, DE, DN, DV)
        SCR += s64 * LQ * DN
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < LQ
        _store_rows(SCR, offs_m, m_ok, tl.full((BLOCK_M, DN_P), 0.0, dtype=CDT), DN, DN_P)  # this program's dnq
        tl.debug_barrier()
        q = _rows(Q, offs_m, m_ok, DE, DE_P)
        do = _rows(DOUT, offs_m, m_ok, DV, DV_P)
        dq = tl.full((BLOCK_M, DE_P), 0.0, dtype=CDT)
        ce = _centres(CENT, offs_m, m_ok, 0, CENTER_E)
        cd = _centres(CENT, offs_m, m_ok, 1, CENTER_N)
        hi = LK
        if CAUSAL:
            hi = tl.minimum(LK, (pid_m + 1) * BLOCK_M + LK - LQ)
        for start_n in range(0, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_ok = offs_n < LK
            k = _rows(K, offs_n, n_ok, DE, DE_P)
            v = _rows(V, offs_n, n_ok, DV, DV_P)
            _, de, g, valid = _pair_grads(q, k, v, do, NQ, NK, MASK, QMASK, s, offs_m, offs_n, m_ok, n_ok, LQ, LK,
                                          smi, smj, sqi, seed, drop_thr, alpha, beta, gate, scale, ce, cd, DN, DC,
                                          PF, E_FN, N_FN, HAS_MASK, HAS_QMASK, CAUSAL, DROPOUT, CDT, FAST, DOT_PREC,
                                          BLOCK_M, BLOCK_N)
            de, g = _centred_grads(de, g, valid, CENT, offs_m, m_ok, CENTER_E, CENTER_N)
            dq = tl.dot(de.to(k.dtype), k, dq, out_dtype=CDT, input_precision=DOT_PREC)
            _sign_cols(NQ, NK, SCR, offs_m, offs_n, m_ok, n_ok, tl.trans(g) * inv_w, DN, DC, PF, CDT)  # dnq += ..
            tl.debug_barrier()
        if SHARED:  # nq is q: the L1 gradient joins dq (DN_P == DE_P)
            dq += _rows(SCR, offs_m, m_ok, DN, DN_P)
        _store_rows(DQ + s64 * LQ * DE, offs_m, m_ok, dq, DE, DE_P)

    @triton.jit(do_not_specialize=["drop_thr"])
    def _stats_kernel(Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, OUT,
                      H, LQ, LK, smb, smh, smi, smj, sqb, sqh, sqi, drop_thr, LQ_BUCKET, LK_BUCKET,
                      DE: tl.constexpr, DN: tl.constexpr, DV: tl.constexpr, DE_P: tl.constexpr, DV_P: tl.constexpr,
                      E_FN: tl.constexpr, N_FN: tl.constexpr, HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr,
                      CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr,
                      DOT_PREC: tl.constexpr, CENTER_E: tl.constexpr, CENTER_N: tl.constexpr, GRAD: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr):
        """Per query row, over its valid pairs: (Σ E, Σ D, count, 0) into OUT (Lq, 4), or with GRAD (Σ dE, Σ G,
        count, 0) of the centred tiles (CENT's means of E and D): the first pass of a centred forward / backward."""
        s = tl.program_id(0)
        pid_m = tl.program_id(1)
        s64 = s.to(tl.int64)
        Q, K, V, NQ, NK, CENT, DOUT, MASK, QMASK, alpha, beta, gate, scale, _inv_w, seed = _slice(
            s, H, Q, K, V, NQ, NK, MASK, QMASK, SCAL, SEED, CENT, DOUT, LQ, LK, smb, smh, sqb, sqh, DE, DN, DV)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < LQ
        q = _rows(Q, offs_m, m_ok, DE, DE_P)
        do = 0.0
        ce = 0.0
        cd = 0.0
        if GRAD:  # the backward's first pass sees the centred tiles (the forward's pass has no DOUT)
            do = _rows(DOUT, offs_m, m_ok, DV, DV_P)
            ce = _centres(CENT, offs_m, m_ok, 0, CENTER_E)
            cd = _centres(CENT, offs_m, m_ok, 1, CENTER_N)
        sums = tl.full((BLOCK_M, 4), 0.0, dtype=CDT)
        col = tl.arange(0, 4)[None, :]
        hi = LK
        if CAUSAL:
            hi = tl.minimum(LK, (pid_m + 1) * BLOCK_M + LK - LQ)
        for start_n in range(0, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_ok = offs_n < LK
            k = _rows(K, offs_n, n_ok, DE, DE_P)
            if GRAD:
                v = _rows(V, offs_n, n_ok, DV, DV_P)
                _, a, b, valid = _pair_grads(q, k, v, do, NQ, NK, MASK, QMASK, s, offs_m, offs_n, m_ok, n_ok, LQ,
                                             LK, smi, smj, sqi, seed, drop_thr, alpha, beta, gate, scale, ce, cd, DN,
                                             DC, PF, E_FN, N_FN, HAS_MASK, HAS_QMASK, CAUSAL, DROPOUT, CDT, FAST,
                                             DOT_PREC, BLOCK_M, BLOCK_N)
            else:
                valid = _valid(MASK, QMASK, offs_m, offs_n, LQ, LK, smi, smj, sqi, HAS_MASK, HAS_QMASK, CAUSAL)
                a = alpha * tl.dot(q, tl.trans(k), out_dtype=CDT, input_precision=DOT_PREC)
                b = _l1_tile(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN, DC, PF, CDT, BLOCK_M, BLOCK_N)
            sa = tl.reduce(tl.where(valid, a, 0.0), 1, _SUM_COMBINE)[:, None]
            sb = tl.reduce(tl.where(valid, b, 0.0), 1, _SUM_COMBINE)[:, None]
            sn = tl.reduce(valid.to(CDT), 1, _SUM_COMBINE)[:, None]
            sums += tl.where(col == 0, sa, tl.where(col == 1, sb, tl.where(col == 2, sn, 0.0)))
        tl.store(OUT + s64 * LQ * 4 + offs_m[:, None] * 4 + col, sums, mask=m_ok[:, None])

    _INTERPRETED = not isinstance(_fwd_kernel, triton.runtime.JITFunction)
