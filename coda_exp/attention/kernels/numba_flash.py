"""Numba kernels of Flash-CoDA on CPU (``flash_cpu``; contract in ``flash_spec``): M V without storing M.

``flash_forward`` / ``flash_backward`` run one (batch, head) slice per thread; inside a slice, queries in blocks of
``_ROWS`` (4) rows and keys in blocks of ``_CHUNK / _ROWS`` (256). ``_flash_block`` computes one block's M (masks and
the counter-based dropout of ``flash_spec.hash32`` applied) and, for the backward, its local derivatives, reusing the
vectorised activations of ``numba_cpu``; the slice's k, nk and v are transposed once (``_transposed_keys``) so every
inner loop runs over contiguous keys. Kept apart from ``numba_cpu`` (the L1 and fused-M kernels) because they share
only the activation helpers. Their on-disk cache is locked across processes (``numba_cache``, imported through
``numba_cpu``): a cache that two processes wrote at once could hand one dtype the other's machine code. numba checks
a cached kernel against its own file only: a change to the helpers in ``numba_cpu`` must come with a change here
(as the accurate tanh near 0 did), or a warm cache keeps running the old helpers inside these kernels.
"""

from __future__ import annotations

import numpy as np

from coda_exp.attention.kernels.numba_cpu import _CHUNK, _FAST, _ROWS, HAVE_NUMBA

if HAVE_NUMBA:
    from numba import njit, prange

    from coda_exp.attention.kernels.numba_cpu import _activate, _rows4

    @njit(inline="always")
    def _mix32(h):  # pragma: no cover - compiled
        """lowbias32 on a uint64 holding a uint32 (``flash_spec.mix32``)."""
        mask = np.uint64(0xFFFFFFFF)
        h ^= h >> np.uint64(16)
        h = (h * np.uint64(0x7FEB352D)) & mask
        h ^= h >> np.uint64(15)
        h = (h * np.uint64(0x846CA68B)) & mask
        return h ^ (h >> np.uint64(16))

    @njit(inline="always")
    def _row_hash(seed, s, i):  # pragma: no cover - compiled
        """mix32(mix32(seed + s) + i): the per-row part of ``flash_spec.hash32``."""
        mask = np.uint64(0xFFFFFFFF)
        return _mix32((_mix32((np.uint64(seed) + np.uint64(s)) & mask) + np.uint64(i)) & mask)

    @njit(fastmath=_FAST, cache=True)
    def _flash_block(q, nq, kt, nkt, i0, nr, j0, jb, s, mflat, moff, ms0, ms1, qvalid, causal, off, coefs, codes,
                     c, ic, seed, need_grad, ebuf, dbuf, work, bits, m, a, b):  # pragma: no cover - compiled
        """One (rows i0..i0+nr) x (keys j0..j0+jb) block of a slice: M (dropout applied: the kept, rescaled value;
        0 elsewhere) into m[r, j], and with ``need_grad`` A = dM/dE_raw, B = dM/dD of the undropped M into a, b,
        all (R, BK) with row stride BK. kt (de, Lk), nkt (dn, Lk): the slice's keys transposed."""
        de, dn = q.shape[1], nq.shape[1]
        bk = m.shape[1]
        alpha, beta, gate, p, keep_scale = coefs[0], coefs[1], coefs[2], coefs[4], coefs[5]
        zero = coefs[3]
        ujb = np.uint64(jb)  # unsigned trip counts and 1-D views: no wraparound branch, LLVM vectorises over j
        if nr == _ROWS:  # four rows share every key load (``_rows4``: register-broadcast query values)
            e0, e1, e2, e3 = ebuf[0], ebuf[1], ebuf[2], ebuf[3]
            d0, d1, d2, d3 = dbuf[0], dbuf[1], dbuf[2], dbuf[3]
            for j in range(ujb):
                e0[j] = zero
                e1[j] = zero
                e2[j] = zero
                e3[j] = zero
                d0[j] = zero
                d1[j] = zero
                d2[j] = zero
                d3[j] = zero
            _rows4(q, i0, kt, j0, jb, e0, e1, e2, e3, False)
            _rows4(nq, i0, nkt, j0, jb, d0, d1, d2, d3, True)
        else:
            for r in range(nr):
                i = i0 + r
                erow, drow = ebuf[r], dbuf[r]
                for j in range(ujb):
                    erow[j] = zero
                    drow[j] = zero
                for kk in range(de):
                    xv = q[i, kk]
                    krow = kt[kk, j0:j0 + jb]
                    for j in range(ujb):
                        erow[j] += xv * krow[j]
                for kk in range(dn):
                    xv = nq[i, kk]
                    krow = nkt[kk, j0:j0 + jb]
                    for j in range(ujb):
                        drow[j] += abs(xv - krow[j])
        for r in range(nr):
            erow, drow = ebuf[r], dbuf[r]
            for j in range(ujb):
                erow[j] = alpha * erow[j]
                drow[j] = -beta * drow[j]
        n = nr * bk
        ve, vn = ebuf.reshape(ebuf.size)[:n], dbuf.reshape(dbuf.size)[:n]
        fe, dfe, fn, dfn, tmp, rr = work[0], work[1], work[2], work[3], work[4], work[5]
        pow2 = bits.view(ebuf.dtype)
        _activate(codes[0], ve, n, fe, dfe, tmp, rr, bits, pow2, c, ic)
        _activate(codes[1], vn, n, fn, dfn, tmp, rr, bits, pow2, c, ic)
        ag, bg = alpha * gate, -beta * gate
        for r in range(nr):
            i = i0 + r
            t0 = r * bk
            fe_r, fn_r, dfe_r, dfn_r = fe[t0:t0 + jb], fn[t0:t0 + jb], dfe[t0:t0 + jb], dfn[t0:t0 + jb]
            mr = m[r]
            for j in range(ujb):
                mr[j] = fe_r[j] * (gate * fn_r[j])
            if need_grad:
                ar, br = a[r], b[r]
                for j in range(ujb):
                    ar[j] = ag * fn_r[j] * dfe_r[j]
                    br[j] = bg * fe_r[j] * dfn_r[j]
            # validity: zero what is masked (vectorised selects over contiguous keys; no mask = one flag of 1)
            start = moff[s] + i * ms0 + j0 * ms1
            hi = jb  # keys [0, hi) of the block may be valid
            if qvalid[s, i] == 0 or (ms1 == 0 and mflat[start] == 0):
                hi = 0
            if causal:
                hi = max(0, min(hi, i + off + 1 - j0))
            if ms1 != 0:
                mm = mflat[start:start + jb * ms1:ms1]
                for j in range(ujb):
                    mr[j] = mr[j] if mm[j] != 0 else zero
                if need_grad:
                    ar, br = a[r], b[r]
                    for j in range(ujb):
                        ok = mm[j] != 0
                        ar[j] = ar[j] if ok else zero
                        br[j] = br[j] if ok else zero
            for j in range(hi, jb):
                mr[j] = zero
            if need_grad:
                for j in range(hi, jb):
                    a[r, j] = zero
                    b[r, j] = zero
            if p > zero:
                h1 = _row_hash(seed, s, i)
                for j in range(hi):
                    h = _mix32((h1 + np.uint64(j0 + j)) & np.uint64(0xFFFFFFFF))
                    u = float(h >> np.uint64(8)) * 5.9604644775390625e-08
                    mr[j] = mr[j] * keep_scale if u >= p else zero

    @njit(cache=True)
    def _transposed_keys(k, nk, v):  # pragma: no cover - compiled
        """(k^T (de, Lk), nk^T (dn, Lk), v^T (dv, Lk)) of one slice: every block loop then runs over contiguous keys."""
        lk, de, dn, dv = k.shape[0], k.shape[1], nk.shape[1], v.shape[1]
        kt = np.empty((de, lk), dtype=k.dtype)
        nkt = np.empty((dn, lk), dtype=k.dtype)
        vt = np.empty((dv, lk), dtype=k.dtype)
        for j in range(lk):
            for kk in range(de):
                kt[kk, j] = k[j, kk]
            for kk in range(dn):
                nkt[kk, j] = nk[j, kk]
            for dd in range(dv):
                vt[dd, j] = v[j, dd]
        return kt, nkt, vt

    @njit(cache=True)
    def _block_buffers(dtype, int_dtype):  # pragma: no cover - compiled
        """Scratch of ``_flash_block``: E and D rows (_ROWS, BK), activation work (6, _CHUNK), exponent bits, M."""
        bk = _CHUNK // _ROWS
        return (np.empty((_ROWS, bk), dtype=dtype), np.empty((_ROWS, bk), dtype=dtype),
                np.empty((6, _CHUNK), dtype=dtype), np.empty(_CHUNK, int_dtype), np.empty((_ROWS, bk), dtype=dtype))

    @njit(inline="always")
    def _key_limit(i0, nr, lk, causal, off):  # pragma: no cover - compiled
        """Keys 0.. this row block may see: all, or up to the causal limit of its last row."""
        if causal:
            return max(0, min(lk, i0 + nr + off))
        return lk

    @njit(parallel=True, fastmath=_FAST, cache=True)
    def flash_forward(q, k, v, nq, nk, mflat, moff, mstride, qvalid, causal, off, coefs, codes, c, ic, seed,
                      out):  # pragma: no cover - compiled
        """Flash-CoDA forward (``flash_spec``), one slice per thread: rows in blocks of _ROWS, keys in blocks of
        _CHUNK / _ROWS; out[s, i] = sum_j M_ij v_j accumulated block by block, M never stored beyond a block."""
        n_slices, lq = q.shape[0], q.shape[1]
        lk, dv = k.shape[1], v.shape[2]
        bk = _CHUNK // _ROWS
        for s in prange(n_slices):
            kt, nkt, vt = _transposed_keys(k[s], nk[s], v[s])
            ebuf, dbuf, work, bits, m = _block_buffers(q.dtype, ic.dtype)
            none = np.empty((0, 0), dtype=q.dtype)
            zero = coefs[3]
            acc = np.empty((_ROWS, dv), dtype=q.dtype)
            for i0 in range(0, lq, _ROWS):
                nr = min(_ROWS, lq - i0)
                acc[:] = 0
                jmax = _key_limit(i0, nr, lk, causal, off)
                for j0 in range(0, jmax, bk):
                    jb = min(bk, jmax - j0)
                    _flash_block(q[s], nq[s], kt, nkt, i0, nr, j0, jb, s, mflat, moff, mstride[0], mstride[1],
                                 qvalid, causal, off, coefs, codes, c, ic, seed, False, ebuf, dbuf, work, bits, m,
                                 none, none)
                    ujb = np.uint64(jb)
                    for r in range(nr, _ROWS):  # rows past a short block: zeros, not stale values
                        for j in range(ujb):
                            m[r, j] = zero
                    m0, m1, m2, m3 = m[0], m[1], m[2], m[3]
                    for dd in range(dv):  # four rows share every v load
                        vrow = vt[dd, j0:j0 + jb]
                        t0, t1, t2, t3 = zero, zero, zero, zero
                        for j in range(ujb):
                            y = vrow[j]
                            t0 += m0[j] * y
                            t1 += m1[j] * y
                            t2 += m2[j] * y
                            t3 += m3[j] * y
                        acc[0, dd] += t0
                        acc[1, dd] += t1
                        acc[2, dd] += t2
                        acc[3, dd] += t3
                for r in range(nr):
                    for dd in range(dv):
                        out[s, i0 + r, dd] = acc[r, dd]

    @njit(parallel=True, fastmath=_FAST, cache=True)
    def flash_backward(q, k, v, nq, nk, mflat, moff, mstride, qvalid, causal, off, coefs, codes, c, ic, seed,
                       dout, shared, dq, dk, dv, dnq, dnk):  # pragma: no cover - compiled
        """Flash-CoDA backward, one slice per thread, recomputing each block: dM = dout v^T (dropout-masked),
        dv += M^T dout, dE = dM A -> dq, dk; G = dM B -> the L1 gradients. Every output written in full; with
        ``shared`` (nq is q, nk is k) the L1 gradients are added into dq / dk and dnq / dnk are not touched."""
        n_slices, lq, de = q.shape
        lk, ndv, dn = k.shape[1], v.shape[2], nq.shape[2]
        bk = _CHUNK // _ROWS
        zero = coefs[3]
        for s in prange(n_slices):
            kt, nkt, vt = _transposed_keys(k[s], nk[s], v[s])
            dkt = np.zeros((de, lk), dtype=q.dtype)
            dnkt = np.zeros((dn, lk), dtype=q.dtype)
            dvt = np.zeros((ndv, lk), dtype=q.dtype)
            ebuf, dbuf, work, bits, m = _block_buffers(q.dtype, ic.dtype)
            a = np.empty((_ROWS, bk), dtype=q.dtype)
            b = np.empty((_ROWS, bk), dtype=q.dtype)
            dm = np.empty((_ROWS, bk), dtype=q.dtype)
            dq_acc = np.empty((_ROWS, de), dtype=q.dtype)
            dnq_acc = np.empty((_ROWS, dn), dtype=q.dtype)
            p, keep_scale = coefs[4], coefs[5]
            rowvals = np.zeros((_ROWS, ndv), dtype=q.dtype)  # dout, q, nq rows of the block, zero-padded
            qrows = np.zeros((_ROWS, de), dtype=q.dtype)
            nqrows = np.zeros((_ROWS, dn), dtype=q.dtype)
            for i0 in range(0, lq, _ROWS):
                nr = min(_ROWS, lq - i0)
                dq_acc[:] = 0
                dnq_acc[:] = 0
                rowvals[:] = 0
                qrows[:] = 0
                nqrows[:] = 0
                for r in range(nr):
                    for dd in range(ndv):
                        rowvals[r, dd] = dout[s, i0 + r, dd]
                    for kk in range(de):
                        qrows[r, kk] = q[s, i0 + r, kk]
                    for kk in range(dn):
                        nqrows[r, kk] = nq[s, i0 + r, kk]
                jmax = _key_limit(i0, nr, lk, causal, off)
                for j0 in range(0, jmax, bk):
                    jb = min(bk, jmax - j0)
                    _flash_block(q[s], nq[s], kt, nkt, i0, nr, j0, jb, s, mflat, moff, mstride[0], mstride[1],
                                 qvalid, causal, off, coefs, codes, c, ic, seed, True, ebuf, dbuf, work, bits, m,
                                 a, b)
                    ujb = np.uint64(jb)
                    dm0, dm1, dm2, dm3 = dm[0], dm[1], dm[2], dm[3]
                    for j in range(ujb):
                        dm0[j], dm1[j], dm2[j], dm3[j] = zero, zero, zero, zero
                    _rows4(rowvals, 0, vt, j0, jb, dm0, dm1, dm2, dm3, False)  # dM = dout v^T (padding rows: 0)
                    for r in range(nr):
                        i = i0 + r
                        dmr, ar, br = dm[r], a[r], b[r]
                        if p > zero:  # dL/dM = keep * scale * dL/d(dropped M): m holds keep * scale * M
                            h1 = _row_hash(seed, s, i)
                            for j in range(jb):
                                h = _mix32((h1 + np.uint64(j0 + j)) & np.uint64(0xFFFFFFFF))
                                u = float(h >> np.uint64(8)) * 5.9604644775390625e-08
                                dmr[j] = dmr[j] * keep_scale if u >= p else zero
                        for j in range(ujb):  # dm -> dE (into a), G (into b)
                            gm = dmr[j]
                            ar[j] = gm * ar[j]
                            br[j] = gm * br[j]
                    for r in range(nr, _ROWS):  # padding rows of a short block contribute nothing
                        for j in range(ujb):
                            m[r, j] = zero
                            a[r, j] = zero
                            b[r, j] = zero
                    # four rows at a time: every key-side accumulator is loaded and stored once per 4 products
                    m0, m1, m2, m3 = m[0], m[1], m[2], m[3]
                    a0, a1, a2, a3 = a[0], a[1], a[2], a[3]
                    b0, b1, b2, b3 = b[0], b[1], b[2], b[3]
                    for dd in range(ndv):
                        g0, g1, g2, g3 = rowvals[0, dd], rowvals[1, dd], rowvals[2, dd], rowvals[3, dd]
                        dvrow = dvt[dd, j0:j0 + jb]
                        for j in range(ujb):
                            dvrow[j] += (m0[j] * g0 + m1[j] * g1) + (m2[j] * g2 + m3[j] * g3)
                    for kk in range(de):
                        x0, x1, x2, x3 = qrows[0, kk], qrows[1, kk], qrows[2, kk], qrows[3, kk]
                        krow = kt[kk, j0:j0 + jb]
                        dkrow = dkt[kk, j0:j0 + jb]
                        s0, s1, s2, s3 = zero, zero, zero, zero
                        for j in range(ujb):
                            y = krow[j]
                            w0, w1, w2, w3 = a0[j], a1[j], a2[j], a3[j]
                            s0 += w0 * y
                            s1 += w1 * y
                            s2 += w2 * y
                            s3 += w3 * y
                            dkrow[j] += (w0 * x0 + w1 * x1) + (w2 * x2 + w3 * x3)
                        dq_acc[0, kk] += s0
                        dq_acc[1, kk] += s1
                        dq_acc[2, kk] += s2
                        dq_acc[3, kk] += s3
                    for kk in range(dn):
                        x0, x1, x2, x3 = nqrows[0, kk], nqrows[1, kk], nqrows[2, kk], nqrows[3, kk]
                        nrow = nkt[kk, j0:j0 + jb]
                        dnrow = dnkt[kk, j0:j0 + jb]
                        s0, s1, s2, s3 = zero, zero, zero, zero
                        for j in range(ujb):
                            y = nrow[j]
                            h0, h1, h2, h3 = b0[j], b1[j], b2[j], b3[j]
                            t0 = h0 if x0 > y else (-h0 if x0 < y else zero)
                            t1 = h1 if x1 > y else (-h1 if x1 < y else zero)
                            t2 = h2 if x2 > y else (-h2 if x2 < y else zero)
                            t3 = h3 if x3 > y else (-h3 if x3 < y else zero)
                            s0 += t0
                            s1 += t1
                            s2 += t2
                            s3 += t3
                            dnrow[j] -= (t0 + t1) + (t2 + t3)
                        dnq_acc[0, kk] += s0
                        dnq_acc[1, kk] += s1
                        dnq_acc[2, kk] += s2
                        dnq_acc[3, kk] += s3
                for r in range(nr):
                    for kk in range(de):
                        dq[s, i0 + r, kk] = dq_acc[r, kk]
                    if shared:
                        for kk in range(dn):
                            dq[s, i0 + r, kk] += dnq_acc[r, kk]
                    else:
                        for kk in range(dn):
                            dnq[s, i0 + r, kk] = dnq_acc[r, kk]
            for j in range(lk):
                for kk in range(de):
                    dk[s, j, kk] = dkt[kk, j]
                for dd in range(ndv):
                    dv[s, j, dd] = dvt[dd, j]
                if shared:
                    for kk in range(dn):
                        dk[s, j, kk] += dnkt[kk, j]
                else:
                    for kk in range(dn):
                        dnk[s, j, kk] = dnkt[kk, j]
