"""Numba CPU kernels for CoDA (Tay et al. 2019): pairwise L1 distance (eq. 2) and the fused composition (eqs. 1-5).

All kernels take C-contiguous float32/float64 numpy arrays laid out as slices (S, rows, features) and run
``prange`` over the S slices (batch x heads). Shared per-slice building blocks:

* ``_l1_slice``: D_ij = sum_k |x_ik - y_jk|. y is transposed once to (d, lb) so the innermost loop runs over
  contiguous j; four rows of x share each y load (register-broadcast x_ik, four row accumulators).
* ``_l1_grad_slice``: dX_ik = sum_j G_ij sign(x_ik - y_jk), dY_jk = -sum_i G_ij sign(x_ik - y_jk), sign(0) = 0,
  four rows at a time, innermost loop over contiguous j (dX_ik is a vector reduction, dY kept transposed (d, lb)
  and shared by the four rows). Per row block only the span of j where G != 0 is visited (masked / causal pairs).
* ``_activate``: f(v) and f'(v) of a row for f in tanh / sigmoid / arctan / algebraic (Table 9). tanh and sigmoid
  use ``_exp_row``, a vectorisable exp (Cody-Waite reduction, degree-13 Taylor polynomial, 2^n built in the
  exponent bits): within 1 ulp of libm in float32 and float64 (no SVML here, scalar libm tanh is ~15x slower).

``gate_forward`` / ``gate_backward`` fuse eqs. 1-5 for the uncentred case: from E_raw = e_a e_b^T and the L1 rows they
write M = f_E(alpha E_raw) * s * f_N(-beta D) plus the two local derivatives A = dM/dE_raw and B = dM/dD (0 on
invalid pairs); the backward turns dM into dE_raw = dM * A and G = dM * B and feeds G straight into the L1 gradient
of the same slice, so no (..., la, lb) tensor other than dE_raw is written.
"""

from __future__ import annotations

import math

import numpy as np

try:  # numba is a declared dependency, but the torch paths must work without it
    from numba import njit, prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only on installs without numba
    HAVE_NUMBA = False

# activation codes shared by f_E and f_N
FUNCTION_CODES = {"tanh": 0, "sigmoid": 1, "arctan": 2, "algebraic": 3}
_ROWS = 4  # rows of x per register block in the L1 kernels
_CHUNK = 1024  # pairs per activation chunk in the fused gate


def exp_constants(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Float constants (in ``dtype``: no float64 promotion inside float32 kernels) and int ones for ``_exp_row``.

    Float: log2(e), ln2 split hi/lo (hi has trailing zero bits so n * hi is exact), range [lo, hi] outside which
    exp is exactly 0 / inf (inside, exp and 1/exp are normal numbers: no denormals, which are ~100x slower), 0.5,
    1, 2, inf, then the Taylor coefficients 1/13! ... 1/0! of exp on |r| <= ln2/2.
    Int (int32 for float32, int64 for float64): exponent bias and mantissa width, to build 2^n from its bits, and
    1 to use the degree-7 polynomial (float32).
    """
    if np.dtype(dtype) == np.float32:  # degree 7: truncation error 0.3466^8 / 8! = 5e-9 < 2^-24
        head = [1.4426950408889634, 0.693359375, -2.12194440e-4, -87.0, 87.0]
        ints = np.array([127, 23, 1], dtype=np.int32)
    else:  # degree 13: 0.3466^14 / 14! = 4e-18 < 2^-53
        head = [1.4426950408889634, 6.93147180369123816490e-01, 1.90821492927058770002e-10, -708.0, 708.0]
        ints = np.array([1023, 52, 0], dtype=np.int64)
    taylor = [1.0 / math.factorial(n) for n in range(13, -1, -1)]
    return np.array(head + [0.5, 1.0, 2.0, math.inf] + taylor, dtype=dtype), ints


if HAVE_NUMBA:
    # Reassociation lets LLVM vectorise the dX reductions; the L1 comparisons and sums stay exact per element.
    _FAST = {"nnan", "ninf", "nsz", "arcp", "contract", "reassoc"}
    # Activations: no reassociation (it would undo the Cody-Waite split), no nnan (masked pairs may hold anything).
    _EXACT = {"nsz", "contract"}

    @njit(fastmath=_FAST, cache=True)
    def _l1_slice(x, y, yt, out, lo, hi):  # pragma: no cover - compiled
        """out[i, j] = sum_k |x[i, k] - y[j, k]| for lo[i] <= j < hi[i] (block union), 0 elsewhere.

        x (la, d), y (lb, d), yt (d, lb) scratch, out (la, lb), lo/hi (la,) int spans.
        """
        la, d = x.shape
        lb = y.shape[0]
        for j in range(lb):
            for k in range(d):
                yt[k, j] = y[j, k]
        acc = np.empty((_ROWS, lb), dtype=x.dtype)
        for i0 in range(0, la, _ROWS):
            nr = min(_ROWS, la - i0)
            j0, j1 = lb, 0
            for r in range(nr):
                j0, j1 = min(j0, lo[i0 + r]), max(j1, hi[i0 + r])
            # unsigned bounds: numba then emits no negative-index wraparound and LLVM vectorises the j loops
            j0, j1 = np.uint64(j0), np.uint64(max(j0, j1))
            acc[:] = 0
            if nr == _ROWS:
                for k in range(d):
                    x0, x1, x2, x3 = x[i0, k], x[i0 + 1, k], x[i0 + 2, k], x[i0 + 3, k]
                    for j in range(j0, j1):
                        yv = yt[k, j]
                        acc[0, j] += abs(x0 - yv)
                        acc[1, j] += abs(x1 - yv)
                        acc[2, j] += abs(x2 - yv)
                        acc[3, j] += abs(x3 - yv)
            else:
                for r in range(nr):
                    for k in range(d):
                        xv = x[i0 + r, k]
                        for j in range(j0, j1):
                            acc[r, j] += abs(xv - yt[k, j])
            for r in range(nr):
                for j in range(lb):
                    out[i0 + r, j] = acc[r, j]

    @njit(fastmath=_FAST, cache=True)
    def _l1_grad_slice(x, y, g, dx, dy, yt, dyt, acc_dy):  # pragma: no cover - compiled
        """dx[i, k] = sum_j g[i, j] sign(x[i, k] - y[j, k]); dy[j, k] = -sum_i g[i, j] sign(...); sign(0) = 0.

        x (la, d), y (lb, d), g (la, lb); dx written in full, dy too, or added to when ``acc_dy`` (a query block's
        share of a key gradient); yt, dyt (d, lb) scratch. ``zero = g - g`` keeps
        every literal in the input dtype (an int 0 would promote float32 selects to float64).
        """
        la, d = x.shape
        lb = y.shape[0]
        for j in range(lb):
            for k in range(d):
                yt[k, j] = y[j, k]
                dyt[k, j] = 0
        for i0 in range(0, la, _ROWS):
            nr = min(_ROWS, la - i0)
            j0, j1 = lb, 0  # span of j with a nonzero g in rows i0 .. i0 + nr - 1
            for r in range(nr):
                a, b = 0, lb
                while a < lb and g[i0 + r, a] == 0:
                    a += 1
                while b > a and g[i0 + r, b - 1] == 0:
                    b -= 1
                if a < b:
                    j0, j1 = min(j0, a), max(j1, b)
            if j0 >= j1:
                for r in range(nr):
                    for k in range(d):
                        dx[i0 + r, k] = 0
                continue
            j0, j1 = np.uint64(j0), np.uint64(j1)  # see _l1_slice
            if nr == _ROWS:
                for k in range(d):
                    xa, xb, xc, xd = x[i0, k], x[i0 + 1, k], x[i0 + 2, k], x[i0 + 3, k]
                    zero = xa - xa
                    sa, sb, sc, sd = zero, zero, zero, zero
                    for j in range(j0, j1):
                        yv = yt[k, j]
                        ga, gb, gc, gd = g[i0, j], g[i0 + 1, j], g[i0 + 2, j], g[i0 + 3, j]
                        ta = ga if xa > yv else (-ga if xa < yv else zero)
                        tb = gb if xb > yv else (-gb if xb < yv else zero)
                        tc = gc if xc > yv else (-gc if xc < yv else zero)
                        td = gd if xd > yv else (-gd if xd < yv else zero)
                        sa += ta
                        sb += tb
                        sc += tc
                        sd += td
                        dyt[k, j] -= (ta + tb) + (tc + td)
                    dx[i0, k], dx[i0 + 1, k], dx[i0 + 2, k], dx[i0 + 3, k] = sa, sb, sc, sd
            else:
                for r in range(nr):
                    i = i0 + r
                    for k in range(d):
                        xa = x[i, k]
                        zero = xa - xa
                        sa = zero
                        for j in range(j0, j1):
                            yv = yt[k, j]
                            ga = g[i, j]
                            ta = ga if xa > yv else (-ga if xa < yv else zero)
                            sa += ta
                            dyt[k, j] -= ta
                        dx[i, k] = sa
        if acc_dy:
            for j in range(lb):
                for k in range(d):
                    dy[j, k] += dyt[k, j]
        else:
            for j in range(lb):
                for k in range(d):
                    dy[j, k] = dyt[k, j]

    @njit(parallel=True, cache=True)
    def l1_forward(x, y, out):  # pragma: no cover - compiled
        """x (S, la, d), y (S, lb, d) -> out (S, la, lb) = sum_k |x_ik - y_jk| (eq. 2 without -beta)."""
        n_slices, la, d = x.shape
        lb = y.shape[1]
        lo = np.zeros(la, dtype=np.int64)
        hi = np.full(la, lb, dtype=np.int64)
        for s in prange(n_slices):
            yt = np.empty((d, lb), dtype=x.dtype)
            _l1_slice(x[s], y[s], yt, out[s], lo, hi)

    @njit(parallel=True, cache=True)
    def l1_backward(x, y, g, dx, dy):  # pragma: no cover - compiled
        """Gradient of ``l1_forward`` for upstream g (S, la, lb): dx (S, la, d), dy (S, lb, d) written in full."""
        n_slices, d = x.shape[0], x.shape[2]
        lb = y.shape[1]
        for s in prange(n_slices):
            yt = np.empty((d, lb), dtype=x.dtype)
            dyt = np.empty((d, lb), dtype=x.dtype)
            _l1_grad_slice(x[s], y[s], g[s], dx[s], dy[s], yt, dyt, False)

    @njit(fastmath=_EXACT, error_model="numpy", cache=True)
    def _exp_row(u, n, out, r, bits, scale, c, ic):  # pragma: no cover - compiled
        """out[:n] = exp(u[:n]) (u and out may be the same array): 0 below c[3], inf above c[4], like libm.

        exp(u) = 2^m exp(t), m = round(u log2 e), t = u - m ln2 (two-part ln2, exact product); exp(t) by Horner,
        degree 7 when ``ic[2]`` (float32) else 13; 2^m written as exponent bits into ``bits``, read back as floats
        through ``scale`` (a view of ``bits``). Saturating to exact 0 keeps sigmoid / tanh of far pairs exact
        zeros/ones, as in torch, instead of denormals. See ``exp_constants``.
        """
        log2e, ln2_hi, ln2_lo, lo, hi, half, inf = c[0], c[1], c[2], c[3], c[4], c[5], c[8]
        zero = half - half
        bias, shift = ic[0], ic[1]
        for j in range(n):
            v = min(max(u[j], lo), hi)
            m = np.floor(v * log2e + half)
            r[j] = (v - m * ln2_hi) - m * ln2_lo
            bits[j] = (ic.dtype.type(m) + bias) << shift
        k7, k6, k5, k4, k3, k2, k1, k0 = c[15], c[16], c[17], c[18], c[19], c[20], c[21], c[22]
        if ic[2]:
            for j in range(n):
                t, w = r[j], u[j]
                p = ((((((k7 * t + k6) * t + k5) * t + k4) * t + k3) * t + k2) * t + k1) * t + k0
                p = p * scale[j]
                out[j] = inf if w > hi else (zero if w < lo else p)
        else:
            k13, k12, k11, k10, k9, k8 = c[9], c[10], c[11], c[12], c[13], c[14]
            for j in range(n):
                t, w = r[j], u[j]
                p = (((((k13 * t + k12) * t + k11) * t + k10) * t + k9) * t + k8) * t + k7
                p = ((((((p * t + k6) * t + k5) * t + k4) * t + k3) * t + k2) * t + k1) * t + k0
                p = p * scale[j]
                out[j] = inf if w > hi else (zero if w < lo else p)

    @njit(fastmath=_EXACT, error_model="numpy", cache=True)
    def _activate(code, v, n, f, df, tmp, r, bits, scale, c, ic):  # pragma: no cover - compiled
        """f[:n] = act(v[:n]), df[:n] = act'(v[:n]) for act = tanh (0), sigmoid (1), arctan (2), algebraic (3)."""
        one, two = c[6], c[7]
        if code == 0:  # tanh(v) = 1 - 2 / (exp(2v) + 1), tanh' = 1 - tanh^2
            for j in range(n):
                tmp[j] = two * v[j]
            _exp_row(tmp, n, tmp, r, bits, scale, c, ic)
            for j in range(n):
                t = one - two / (tmp[j] + one)
                f[j] = t
                df[j] = one - t * t
        elif code == 1:  # sigmoid(v) = 1 / (1 + exp(-v)), sigmoid' = sigmoid (1 - sigmoid)
            for j in range(n):
                tmp[j] = -v[j]
            _exp_row(tmp, n, tmp, r, bits, scale, c, ic)
            for j in range(n):
                t = one / (one + tmp[j])
                f[j] = t
                df[j] = t * (one - t)
        elif code == 2:  # arctan, arctan' = 1 / (1 + v^2)
            for j in range(n):
                f[j] = math.atan(v[j])
                df[j] = one / (one + v[j] * v[j])
        else:  # algebraic: v / sqrt(1 + v^2), derivative (1 + v^2)^(-3/2)
            for j in range(n):
                q = one / np.sqrt(one + v[j] * v[j])
                f[j] = v[j] * q
                df[j] = q * q * q

    @njit(fastmath=_EXACT, error_model="numpy", cache=True)
    def _gate_slice(energy, dist, valid, coefs, e_code, n_code, c, ic, need_grad, m, a, b):  # pragma: no cover
        """Eqs. 1-5 on one slice: M = f_E(alpha E_raw) * s * f_N(-beta D); A = dM/dE_raw, B = dM/dD; invalid -> 0.

        energy = E_raw, dist = D, valid (uint8), m: the slice flattened to (la * lb,); a, b likewise or empty when
        not ``need_grad``; coefs = [alpha, beta, s, 0] in the dtype. A = alpha s f_N f_E', B = -beta s f_E f_N'.
        Runs in chunks of _CHUNK pairs (amortises the per-call cost of the row helpers, stays in L1).
        """
        size = energy.shape[0]
        alpha, beta, scale, zero = coefs[0], coefs[1], coefs[2], coefs[3]
        dtype = energy.dtype
        work = np.empty((8, _CHUNK), dtype)
        ve, vn, fe, dfe, fn, dfn, tmp, r = work[0], work[1], work[2], work[3], work[4], work[5], work[6], work[7]
        bits = np.empty(_CHUNK, ic.dtype)
        pow2 = bits.view(dtype)
        for p0 in range(0, size, _CHUNK):
            n = min(_CHUNK, size - p0)
            # chunk views indexed from 0: a signed offset index (p0 + q) would get numba's negative-index
            # wraparound branch, which stops LLVM from vectorising
            e_c, d_c, v_c, m_c = energy[p0:p0 + n], dist[p0:p0 + n], valid[p0:p0 + n], m[p0:p0 + n]
            for q in range(n):
                ve[q] = alpha * e_c[q]
                vn[q] = -beta * d_c[q]
            _activate(e_code, ve, n, fe, dfe, tmp, r, bits, pow2, c, ic)
            _activate(n_code, vn, n, fn, dfn, tmp, r, bits, pow2, c, ic)
            # every operand is loaded before the select: numba turns a select of loads into branches, which
            # LLVM does not vectorise
            for q in range(n):
                val = fe[q] * (scale * fn[q])
                m_c[q] = val if v_c[q] else zero
            if need_grad:
                a_c, b_c = a[p0:p0 + n], b[p0:p0 + n]
                for q in range(n):
                    ok = v_c[q] != 0
                    da = alpha * scale * fn[q] * dfe[q]
                    db = -beta * scale * fe[q] * dfn[q]
                    a_c[q] = da if ok else zero
                    b_c[q] = db if ok else zero

    @njit(cache=True)
    def _mask_rows(flat, base, row_stride, col_stride, valid, lo, hi):  # pragma: no cover - compiled
        """valid[i, j] = flat[base + i * row_stride + j * col_stride]; [lo[i], hi[i]) = span of valid j in row i."""
        la, lb = valid.shape
        for i in range(la):
            start = base + i * row_stride
            if col_stride == 0:
                valid[i, :] = flat[start]
            elif col_stride == 1:
                valid[i, :] = flat[start:start + lb]
            else:
                for j in range(lb):
                    valid[i, j] = flat[start + j * col_stride]
            a, b = 0, lb
            while a < lb and valid[i, a] == 0:
                a += 1
            while b > a and valid[i, b - 1] == 0:
                b -= 1
            lo[i], hi[i] = a, b

    @njit(parallel=True, cache=True)
    def gate_forward(energy, x, y, mflat, moff, mstride, coefs, codes, c, ic, need_grad, m, a, b):  # pragma: no cover
        """Fused forward on S slices: D = L1(x, y) row by row (only the span of valid j), then ``_gate_slice``.

        energy (S, la, lb) = e_a e_b^T; x (S, la, dn), y (S, lb, dn) = n_a, n_b; mask element (s, i, j) is
        mflat[moff[s] + i * mstride[0] + j * mstride[1]] (broadcast dims have stride 0; no mask: [1], strides 0).
        Writes m, and a, b when ``need_grad`` (each (S, la, lb)).
        """
        n_slices, la, lb = energy.shape
        d = x.shape[2]
        for s in prange(n_slices):
            valid = np.empty((la, lb), dtype=np.uint8)
            lo = np.empty(la, dtype=np.int64)
            hi = np.empty(la, dtype=np.int64)
            _mask_rows(mflat, moff[s], mstride[0], mstride[1], valid, lo, hi)
            yt = np.empty((d, lb), dtype=x.dtype)
            dist = np.empty((la, lb), dtype=x.dtype)
            _l1_slice(x[s], y[s], yt, dist, lo, hi)
            size = la * lb
            sa = a.shape[1] * a.shape[2]  # 0 without need_grad
            _gate_slice(energy[s].reshape(size), dist.reshape(size), valid.reshape(size), coefs, codes[0], codes[1],
                        c, ic, need_grad, m[s].reshape(size), a[s].reshape(sa), b[s].reshape(sa))

    @njit(fastmath=_FAST, cache=True)
    def _products(dm, a, b, de, g):  # pragma: no cover - compiled
        """de = dm * a, g = dm * b on flattened slices (dE_raw and dD of the fused gate)."""
        for q in range(dm.shape[0]):
            gm = dm[q]
            de[q] = gm * a[q]
            g[q] = gm * b[q]

    @njit(parallel=True, fastmath=_FAST, cache=True)
    def gate_backward(dm, a, b, x, y, de, dx, dy, acc_dy):  # pragma: no cover - compiled
        """dE_raw = dm * a (written to de); G = dm * b goes straight into the L1 gradient (dx, dy) of each slice;
        dy is added to when ``acc_dy`` (Flash-CoDA's query blocks), else written."""
        n_slices, la, lb = dm.shape
        d = x.shape[2]
        for s in prange(n_slices):
            g = np.empty((la, lb), dtype=x.dtype)
            size = la * lb
            _products(dm[s].reshape(size), a[s].reshape(size), b[s].reshape(size), de[s].reshape(size),
                      g.reshape(size))
            yt = np.empty((d, lb), dtype=x.dtype)
            dyt = np.empty((d, lb), dtype=x.dtype)
            _l1_grad_slice(x[s], y[s], g, dx[s], dy[s], yt, dyt, acc_dy)

    @njit(parallel=True, cache=True)
    def dropout_rows(x, seed, row0, p, scale):  # pragma: no cover - compiled
        """Flash-CoDA's counter-based dropout in place on x (S, rows, lb), rows row0.. of each slice (``flash_spec``):
        x[s, i, j] *= scale if uniform(seed, s, row0 + i, j) >= p else 0; uniform = (hash32 >> 8) * 2^-24."""
        n_slices, rows, lb = x.shape
        mask = np.uint64(0xFFFFFFFF)
        ma, mb = np.uint64(0x7FEB352D), np.uint64(0x846CA68B)
        s16, s15, s8 = np.uint64(16), np.uint64(15), np.uint64(8)
        zero = x.dtype.type(0)
        for s in prange(n_slices):
            h0 = (np.uint64(seed) + np.uint64(s)) & mask
            h0 ^= h0 >> s16
            h0 = (h0 * ma) & mask
            h0 ^= h0 >> s15
            h0 = (h0 * mb) & mask
            h0 ^= h0 >> s16
            for i in range(rows):
                h1 = (h0 + np.uint64(row0 + i)) & mask
                h1 ^= h1 >> s16
                h1 = (h1 * ma) & mask
                h1 ^= h1 >> s15
                h1 = (h1 * mb) & mask
                h1 ^= h1 >> s16
                for j in range(lb):
                    h = (h1 + np.uint64(j)) & mask
                    h ^= h >> s16
                    h = (h * ma) & mask
                    h ^= h >> s15
                    h = (h * mb) & mask
                    h ^= h >> s16
                    u = float(h >> s8) * 5.9604644775390625e-08
                    x[s, i, j] = x[s, i, j] * scale if u >= p else zero

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
        if nr == _ROWS:  # four rows share every key load (register-broadcast query values)
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
            for kk in range(de):
                x0, x1, x2, x3 = q[i0, kk], q[i0 + 1, kk], q[i0 + 2, kk], q[i0 + 3, kk]
                krow = kt[kk, j0:j0 + jb]
                for j in range(ujb):
                    y = krow[j]
                    e0[j] += x0 * y
                    e1[j] += x1 * y
                    e2[j] += x2 * y
                    e3[j] += x3 * y
            for kk in range(dn):
                x0, x1, x2, x3 = nq[i0, kk], nq[i0 + 1, kk], nq[i0 + 2, kk], nq[i0 + 3, kk]
                krow = nkt[kk, j0:j0 + jb]
                for j in range(ujb):
                    y = krow[j]
                    d0[j] += abs(x0 - y)
                    d1[j] += abs(x1 - y)
                    d2[j] += abs(x2 - y)
                    d3[j] += abs(x3 - y)
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
                    for r in range(nr):
                        mrow = m[r]
                        for dd in range(dv):
                            vrow = vt[dd, j0:j0 + jb]
                            total = zero
                            for j in range(ujb):
                                total += mrow[j] * vrow[j]
                            acc[r, dd] += total
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
                    for r in range(nr):
                        i = i0 + r
                        dmr, ar, br = dm[r], a[r], b[r]
                        for j in range(ujb):
                            dmr[j] = zero
                        for dd in range(ndv):
                            g = dout[s, i, dd]
                            vrow = vt[dd, j0:j0 + jb]
                            for j in range(ujb):
                                dmr[j] += g * vrow[j]
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
