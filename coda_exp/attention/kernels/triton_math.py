"""Element-wise @triton.jit helpers of Flash-CoDA's kernels (``triton_jit``, ``triton_bwd``): activations and their
derivatives, the step of an L1 term's sign, the dropout hash, the validity tile, the L1 distance of a tile (``_l1_tile``:
feature chunks by columns or over a grid of pairs, in float16 where nq, nk are).

Only triton.language builtins are called (see ``triton_jit``). ``flash_triton`` loads an interpreted copy of this
module beside the interpreted copy of ``triton_jit`` (whose kernels then call interpreted helpers).
"""

try:  # triton is optional (Linux x86-64 dev extra): without it this module defines nothing
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only on installs without triton
    HAVE_TRITON = False

if HAVE_TRITON:
    # reductions by tl.reduce with tl.sum's combine (numpy.sum when interpreted): tl.sum is a @jit function
    _SUM_COMBINE = tl.standard._sum_combine

    @triton.jit
    def _cols(P, offs, ok, c0, DN: tl.constexpr, DC: tl.constexpr, CDT: tl.constexpr):
        """Features c0 .. c0 + DC of rows ``offs``, transposed: a (DC, len(offs)) chunk in CDT, zero-padded."""
        offs_c = c0 + tl.arange(0, DC)
        return tl.load(P + offs_c[:, None] + (offs * DN)[None, :], mask=(offs_c < DN)[:, None] & ok[None, :],
                       other=0.0).to(CDT)

    @triton.jit
    def _l1_tile(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr,
                 CDT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """Σ_c |nq_ic - nk_jc|, DC features at a time: (DC, BLOCK_M, BLOCK_N) register tiles summed over the feature
        axis in-thread, from two coalesced loads. PF 1: the next chunk is loaded before this one is summed (its
        latency hidden); PF 2: the tile as (RM, RN, 8, 8) pairs (``_l1_grid``; sign sums load as PF 1).

        float16 nq, nk (``triton_args._l1_args``: 16-bit inputs divided by a power of two w, |x| <= 2048, exactly)
        are subtracted and summed in float16 over each chunk, then added in CDT: packed half2 adds with |x| a free
        operand (sm_90 SASS, 64 x 64, DC 4: 1.7 instructions per pair and feature for the chunk loop against 2.9
        from bfloat16 in float32, 89 registers against 121). A chunk's |difference| <= 4096 and its sum
        <= 4096 DC stay finite for DC <= 8; each float16 operation rounds to 2^-11 relative."""
        if NQ.dtype.element_ty == tl.float16:
            tl.static_assert(DC <= 8)
            dist = _l1_chunks(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN, DC, PF, tl.float16, CDT, BLOCK_M, BLOCK_N)
        else:
            dist = _l1_chunks(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN, DC, PF, CDT, CDT, BLOCK_M, BLOCK_N)
        return dist

    @triton.jit
    def _l1_chunks(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN: tl.constexpr, DC: tl.constexpr, PF: tl.constexpr,
                   LDT: tl.constexpr, CDT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """``_l1_tile``: each chunk's differences and sum in LDT, the distances in CDT."""
        if PF == 2:
            return _l1_grid(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN, DC, LDT, CDT, BLOCK_M, BLOCK_N)
        dist = tl.full((BLOCK_M, BLOCK_N), 0.0, dtype=CDT)
        if PF == 1:
            a = _cols(NQ, offs_m, m_ok, 0, DN, DC, LDT)
            b = _cols(NK, offs_n, n_ok, 0, DN, DC, LDT)
        for c0 in range(0, DN, DC):
            if PF == 1:
                a_c, b_c = a, b
                a = _cols(NQ, offs_m, m_ok, c0 + DC, DN, DC, LDT)  # past DN: masked, nothing read
                b = _cols(NK, offs_n, n_ok, c0 + DC, DN, DC, LDT)
            else:
                a_c = _cols(NQ, offs_m, m_ok, c0, DN, DC, LDT)
                b_c = _cols(NK, offs_n, n_ok, c0, DN, DC, LDT)
            dist += tl.reduce(tl.abs(a_c[:, :, None] - b_c[:, None, :]), 0, _SUM_COMBINE).to(CDT)
        return dist

    @triton.jit
    def _l1_grid(NQ, NK, offs_m, offs_n, m_ok, n_ok, DN: tl.constexpr, DC: tl.constexpr, LDT: tl.constexpr,
                 CDT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        """Σ_c |nq_ic - nk_jc| as ``_l1_tile`` computes it, over the tile's pairs indexed (RM, RN, 8, 8), i = rm 8 + tm,
        j = rn 8 + tn, as the fused backward's sign tile is (``triton_bwd._sign_pairs``), each chunk loaded as
        (DC, RM, 8) and (DC, RN, 8) tiles. sm_90, 64 x 64, DC 2, 4 warps: Triton 3.9, bf16, 206 registers instead of
        247 and 8 shared-memory loads per 128 FADDs instead of 18 (capped at 168, three programs per SM: no spill);
        the GPU machine's 3.6: bf16 246 and 24 (PF 0: 242 and 10, at 4.5 instructions per pair and feature
        against 3.5), float32 231 and 6 (235 and 18). Config PF 2: the fastest forward on an H200 (12.9 ms at L
        4096 against PF 0's 14.7, ``flash_triton.CONFIGS``); BLOCK_M, BLOCK_N multiples of 8. Each chunk is summed
        in LDT (``_l1_tile``), then added in CDT."""
        tl.static_assert(BLOCK_M % 8 == 0 and BLOCK_N % 8 == 0)
        RM: tl.constexpr = BLOCK_M // 8
        RN: tl.constexpr = BLOCK_N // 8
        rows = tl.reshape(offs_m, (RM, 8))
        rows_ok = tl.reshape(m_ok, (RM, 8))
        cols = tl.reshape(offs_n, (RN, 8))
        cols_ok = tl.reshape(n_ok, (RN, 8))
        dist = tl.full((RM, RN, 8, 8), 0.0, dtype=CDT)
        for c0 in range(0, DN, DC):
            offs_c = c0 + tl.arange(0, DC)
            a = tl.load(NQ + offs_c[:, None, None] + (rows * DN)[None, :, :],
                        mask=(offs_c < DN)[:, None, None] & rows_ok[None, :, :], other=0.0).to(LDT)
            b = tl.load(NK + offs_c[:, None, None] + (cols * DN)[None, :, :],
                        mask=(offs_c < DN)[:, None, None] & cols_ok[None, :, :], other=0.0).to(LDT)
            dist += tl.reduce(tl.abs(a[:, :, None, :, None] - b[:, None, :, None, :]), 0, _SUM_COMBINE).to(CDT)
        return tl.reshape(tl.permute(dist, (0, 2, 1, 3)), (BLOCK_M, BLOCK_N))

    @triton.jit
    def _div(a, b, CDT: tl.constexpr):
        """a / b: correctly rounded in float64, ``div.full`` (2 ulp, no slow path) in float32."""
        if CDT == tl.float64:
            r = a / b
        else:
            r = tl.fdiv(a, b, ieee_rounding=False)
        return r

    @triton.jit
    def _tanh(x, CDT: tl.constexpr, FAST: tl.constexpr):
        if FAST:  # one MUFU.TANH (max rel. error 2^-11: only for 16-bit inputs)
            y = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                          is_pure=True, pack=1)
        else:  # (1 - e) / (1 + e), e = exp(-2|x|), from |x| = 0.625 up; below it Cephes' x + x z R(z), z = x^2
            # (``numba_constants``: the exp form cancels near 0, all digits gone below ~1e-8 in float32), ~1-2 ulp
            a = tl.abs(x)
            e = tl.exp(-2.0 * a)
            big = _div(1.0 - e, 1.0 + e, CDT)
            z = x * x
            if CDT == tl.float64:
                p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3
                q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3
                small = x + x * z * _div(p, q, CDT)
            else:
                small = ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z
                          + 1.33314422036e-1) * z - 3.33332819422e-1) * z * x + x
            y = tl.where(a < 0.625, small, tl.where(x < 0, -big, big))
        return y

    @triton.jit
    def _atan(x, CDT: tl.constexpr):
        """Cephes atan: reduce |x| to [0, 0.66], then x + x z P(z) / Q(z) with z = x^2 (~1 ulp in float64)."""
        a = tl.abs(x)
        big = a > 2.41421356237309504880  # tan(3 pi / 8)
        mid = (a > 0.66) & (a <= 2.41421356237309504880)
        safe = tl.where(big, a, 1.0)
        r = tl.where(big, -_div(1.0, safe, CDT), tl.where(mid, _div(a - 1.0, a + 1.0, CDT), a))
        bigf = big.to(x.dtype)
        midf = mid.to(x.dtype)
        base = bigf * 1.57079632679489661923 + midf * 0.78539816339744830962
        more = bigf * 6.123233995736765886130e-17 + midf * 3.061616997868382943065e-17
        z = r * r
        p = (((-8.750608600031904122785e-1 * z - 1.615753718733365076637e1) * z - 7.500855792314704667340e1) * z
             - 1.228866684490136173410e2) * z - 6.485021904942025371773e1
        q = ((((z + 2.485846490142306297962e1) * z + 1.650270098316988542046e2) * z + 4.328810604912902668951e2)
             * z + 4.853903996359136964868e2) * z + 1.945506571482613964425e2
        y = base + (r * _div(z * p, q, CDT) + r) + more
        return tl.where(x < 0, -y, y)

    @triton.jit
    def _rsqrt1p(x, CDT: tl.constexpr):
        """1 / sqrt(1 + x^2)."""
        if CDT == tl.float64:
            r = 1.0 / tl.sqrt(1.0 + x * x)
        else:
            r = tl.rsqrt(1.0 + x * x)
        return r

    @triton.jit
    def _act(x, FN: tl.constexpr, CDT: tl.constexpr, FAST: tl.constexpr):
        """f(x) for the code FN (0 tanh, 1 sigmoid, 2 arctan, 3 algebraic x / sqrt(1 + x^2))."""
        if FN == 0:
            y = _tanh(x, CDT, FAST)
        elif FN == 1:
            if FAST:
                y = 0.5 * _tanh(0.5 * x, CDT, FAST) + 0.5
            else:
                y = _div(1.0, 1.0 + tl.exp(-x), CDT)
        elif FN == 2:
            y = _atan(x, CDT)
        else:
            y = x * _rsqrt1p(x, CDT)
        return y

    @triton.jit
    def _act_grad(x, y, FN: tl.constexpr, CDT: tl.constexpr):
        """f'(x) given y = f(x)."""
        if FN == 0:
            g = 1.0 - y * y
        elif FN == 1:
            g = y * (1.0 - y)
        elif FN == 2:
            g = _div(1.0, 1.0 + x * x, CDT)
        else:
            r = _rsqrt1p(x, CDT)
            g = r * r * r
        return g

    @triton.jit
    def _step(d, CDT: tl.constexpr):
        """1 where d > 0, 0 where d < 0, 1/2 where d = 0 (so sign(d) = 2 step(d) - 1): clamp(d 2^e + 1/2, 0, 1), one
        saturated FMA in float32; 2^e (2^127, float64 2^1023) takes every normal |d| past 1/2 (a subnormal d gets
        a step between 0 and 1)."""
        if CDT == tl.float64:
            big = 8.98846567431158e307  # 2^1023
        else:
            big = 1.7014118346046923e38  # 2^127
        return tl.clamp(d * big + 0.5, 0.0, 1.0)

    @triton.jit
    def _mix32(x):
        """lowbias32 on uint32 (products wrap mod 2^32, shifts are logical): ``flash_spec.mix32``."""
        x = x ^ (x >> 16)
        x = x * 0x7FEB352D
        x = x ^ (x >> 15)
        x = x * 0x846CA68B
        return x ^ (x >> 16)

    @triton.jit
    def _keep(seed, s, offs_m, offs_n, drop_thr):
        """Dropout keep tile: hash32(seed, s, i, j) >> 8 >= drop_thr (= ceil(p 2^24))."""
        h = _mix32(s.to(tl.uint32) + seed)  # uint32 arithmetic wraps
        h = _mix32(h + offs_m.to(tl.uint32))
        h = _mix32(h[:, None] + offs_n.to(tl.uint32)[None, :])
        return (h >> 8) >= drop_thr

    @triton.jit
    def _valid(MASK, QMASK, offs_m, offs_n, LQ, LK, smi, smj, sqi,
               HAS_MASK: tl.constexpr, HAS_QMASK: tl.constexpr, CAUSAL: tl.constexpr):
        """Validity tile (BLOCK_M, BLOCK_N): in range, query_mask, causal limit, general mask (slice bases given)."""
        m_ok = offs_m < LQ
        ok = m_ok[:, None] & (offs_n < LK)[None, :]
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None] + (LK - LQ))
        if HAS_QMASK:
            qm = tl.load(QMASK + offs_m.to(tl.int64) * sqi, mask=m_ok, other=0)
            ok = ok & (qm != 0)[:, None]
        if HAS_MASK:
            ptrs = MASK + (offs_m.to(tl.int64) * smi)[:, None] + (offs_n.to(tl.int64) * smj)[None, :]
            ok = ok & (tl.load(ptrs, mask=ok, other=0) != 0)
        return ok

