"""Numba CPU kernels for CoDA (Tay et al. 2019): pairwise L1 distance (eq. 2) and the fused composition (eqs. 1-5).

All kernels take C-contiguous float32/float64 numpy arrays laid out as slices (S, rows, features) and run
``prange`` over the S slices (batch x heads). Shared per-slice building blocks:

* ``_rows4``: four rows of sum_k |x_ik - y_jk| (or of x_ik y_jk) over contiguous j of a transposed y, four
  features per pass (one accumulator load and store per four terms); ``_l1_slice`` (D_ij = sum_k |x_ik - y_jk|,
  y transposed once to (d, lb)) and Flash-CoDA's blocks (``numba_flash``) build on it.
* ``_l1_grad_slice``: dX_ik = sum_j G_ij sign(x_ik - y_jk), dY_jk = -sum_i G_ij sign(x_ik - y_jk), sign(0) = 0,
  four rows at a time, innermost loop over contiguous j (dX_ik is a vector reduction, dY kept transposed (d, lb)
  and shared by the four rows). Per row block only the span of j where G != 0 is visited (masked / causal pairs).
* ``_activate``: f(v), f'(v) of a row for f in tanh / sigmoid / arctan / algebraic (Table 9); tanh and sigmoid by
  ``_exp_row``, a vectorisable exp within 1 ulp of libm (no SVML here; scalar libm tanh is ~15x slower), tanh
  below |v| 0.625 by Cephes' rational form instead (the exp form cancels near 0); constants: ``numba_constants``.

``gate_forward`` / ``gate_backward`` fuse eqs. 1-5 for the uncentred case: from E_raw = e_a e_b^T and the L1 rows they
write M = f_E(alpha E_raw) * s * f_N(-beta D) plus the two local derivatives A = dM/dE_raw and B = dM/dD (0 on
invalid pairs); the backward turns dM into dE_raw = dM * A and G = dM * B and feeds G straight into the L1 gradient
of the same slice, so no (..., la, lb) tensor other than dE_raw is written.
"""

from __future__ import annotations

import math

import numpy as np

# numba (a declared dependency, but the torch paths work without it), its cache locked across processes
from coda_exp.attention.kernels.numba_cache import HAVE_NUMBA, njit, prange
from coda_exp.attention.kernels.numba_constants import exp_constants  # noqa: F401 (callers: numba_cpu.exp_constants)

# activation codes shared by f_E and f_N
FUNCTION_CODES = {"tanh": 0, "sigmoid": 1, "arctan": 2, "algebraic": 3}
_ROWS = 4  # rows of x per register block in the L1 kernels
_CHUNK = 1024  # pairs per activation chunk in the fused gate


if HAVE_NUMBA:
    # Reassociation lets LLVM vectorise the dX reductions; the L1 comparisons and sums stay exact per element.
    _FAST = {"nnan", "ninf", "nsz", "arcp", "contract", "reassoc"}
    # Activations: no reassociation (it would undo the Cody-Waite split), no nnan (masked pairs may hold anything).
    _EXACT = {"nsz", "contract"}

    @njit(fastmath=_FAST, cache=True)
    def _rows4(x, i0, yt, j0, n, o0, o1, o2, o3, l1):  # pragma: no cover - compiled
        """o_r[j] += sum_k t(x[i0 + r, k], yt[k, j0 + j]) for r < 4, j < n: t = |x - y| with ``l1``, else x * y.
        x (rows, d), yt (d, cols) C-contiguous, o_r 1-D of length >= n. Four features per pass over j (one load and
        store of each accumulator per four terms: one term per pass was bound by those stores)."""
        d = x.shape[1]
        d4 = d - d % 4
        un = np.uint64(n)  # unsigned trip count: no wraparound branch, LLVM vectorises
        x0, x1, x2, x3 = x[i0], x[i0 + 1], x[i0 + 2], x[i0 + 3]
        for k in range(0, d4, 4):
            p0, p1, p2, p3 = x0[k], x0[k + 1], x0[k + 2], x0[k + 3]
            q0, q1, q2, q3 = x1[k], x1[k + 1], x1[k + 2], x1[k + 3]
            r0, r1, r2, r3 = x2[k], x2[k + 1], x2[k + 2], x2[k + 3]
            s0, s1, s2, s3 = x3[k], x3[k + 1], x3[k + 2], x3[k + 3]
            y0, y1, y2, y3 = yt[k, j0:j0 + n], yt[k + 1, j0:j0 + n], yt[k + 2, j0:j0 + n], yt[k + 3, j0:j0 + n]
            if l1:
                for j in range(un):
                    u0, u1, u2, u3 = y0[j], y1[j], y2[j], y3[j]
                    o0[j] += (abs(p0 - u0) + abs(p1 - u1)) + (abs(p2 - u2) + abs(p3 - u3))
                    o1[j] += (abs(q0 - u0) + abs(q1 - u1)) + (abs(q2 - u2) + abs(q3 - u3))
                    o2[j] += (abs(r0 - u0) + abs(r1 - u1)) + (abs(r2 - u2) + abs(r3 - u3))
                    o3[j] += (abs(s0 - u0) + abs(s1 - u1)) + (abs(s2 - u2) + abs(s3 - u3))
            else:
                for j in range(un):
                    u0, u1, u2, u3 = y0[j], y1[j], y2[j], y3[j]
                    o0[j] += (p0 * u0 + p1 * u1) + (p2 * u2 + p3 * u3)
                    o1[j] += (q0 * u0 + q1 * u1) + (q2 * u2 + q3 * u3)
                    o2[j] += (r0 * u0 + r1 * u1) + (r2 * u2 + r3 * u3)
                    o3[j] += (s0 * u0 + s1 * u1) + (s2 * u2 + s3 * u3)
        for k in range(d4, d):
            p0, q0, r0, s0 = x0[k], x1[k], x2[k], x3[k]
            y0 = yt[k, j0:j0 + n]
            for j in range(un):
                u0 = y0[j]
                if l1:
                    o0[j] += abs(p0 - u0)
                    o1[j] += abs(q0 - u0)
                    o2[j] += abs(r0 - u0)
                    o3[j] += abs(s0 - u0)
                else:
                    o0[j] += p0 * u0
                    o1[j] += q0 * u0
                    o2[j] += r0 * u0
                    o3[j] += s0 * u0

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
        a0, a1, a2, a3 = acc[0], acc[1], acc[2], acc[3]
        for i0 in range(0, la, _ROWS):
            nr = min(_ROWS, la - i0)
            j0, j1 = lb, 0
            for r in range(nr):
                j0, j1 = min(j0, lo[i0 + r]), max(j1, hi[i0 + r])
            j1 = max(j0, j1)
            for j in range(lb):  # explicit loops: numba's acc[:] = 0 is a generic, ~10x slower copy
                a0[j], a1[j], a2[j], a3[j] = 0, 0, 0, 0
            if nr == _ROWS:
                _rows4(x, i0, yt, j0, j1 - j0, a0[j0:], a1[j0:], a2[j0:], a3[j0:], True)
            else:
                # unsigned bounds: numba then emits no negative-index wraparound and LLVM vectorises the j loops
                uj0, uj1 = np.uint64(j0), np.uint64(j1)
                for r in range(nr):
                    ar, xr = acc[r], x[i0 + r]
                    for k in range(d):
                        xv, yk = xr[k], yt[k]
                        for j in range(uj0, uj1):
                            ar[j] += abs(xv - yk[j])
            for r in range(nr):
                orow, ar = out[i0 + r], acc[r]
                for j in range(lb):
                    orow[j] = ar[j]

    @njit(fastmath=_FAST, cache=True)
    def _l1_grad_slice(x, y, g, dx, dy, yt, dyt):  # pragma: no cover - compiled
        """dx[i, k] = sum_j g[i, j] sign(x[i, k] - y[j, k]); dy[j, k] = -sum_i g[i, j] sign(...); sign(0) = 0.

        x (la, d), y (lb, d), g (la, lb); dx, dy written in full; yt, dyt (d, lb) scratch. ``zero = g - g`` keeps
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
            _l1_grad_slice(x[s], y[s], g[s], dx[s], dy[s], yt, dyt)

    @njit(fastmath=_EXACT, error_model="numpy", cache=True)
    def _exp_row(u, n, out, r, bits, scale, c, ic):  # pragma: no cover - compiled
        """out[:n] = exp(u[:n]): 0 below c[3], inf above c[4], like libm. u and out must be different arrays: LLVM's
        runtime overlap check then sends the loop down its scalar path (tanh took ~2.6x as long in place).

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
        if code == 0:  # tanh, tanh' = 1 - tanh^2; tanh(v) = sign(v) (1 - 2 / (exp(2|v|) + 1)) from |v| = c[23] up,
            # below it v + v z R(z), z = v^2 (Cephes; see numba_constants): 1 - 2 / (e + 1) cancels near 0. Both
            # forms for every pair, then a select (a branch per pair would stop LLVM from vectorising)
            for j in range(n):
                tmp[j] = two * abs(v[j])
            _exp_row(tmp, n, f, r, bits, scale, c, ic)  # r is free again: the small form goes there
            if ic[2]:
                p4, p3, p2, p1, p0 = c[24], c[25], c[26], c[27], c[28]
                for j in range(n):
                    x = v[j]
                    z = x * x
                    r[j] = ((((p4 * z + p3) * z + p2) * z + p1) * z + p0) * z * x + x
            else:
                p2, p1, p0, q2, q1, q0 = c[24], c[25], c[26], c[27], c[28], c[29]
                for j in range(n):
                    x = v[j]
                    z = x * x
                    r[j] = x + x * z * (((p2 * z + p1) * z + p0) / (((z + q2) * z + q1) * z + q0))
            cut, zero = c[23], one - one
            for j in range(n):
                x, small, e = v[j], r[j], f[j]  # loaded before the selects (see _gate_slice)
                big = one - two / (e + one)
                big = -big if x < zero else big
                t = small if abs(x) < cut else big
                f[j] = t
                df[j] = one - t * t
        elif code == 1:  # sigmoid(v) = 1 / (1 + exp(-v)), sigmoid' = sigmoid (1 - sigmoid)
            for j in range(n):
                tmp[j] = -v[j]
            _exp_row(tmp, n, f, r, bits, scale, c, ic)
            for j in range(n):
                t = one / (one + f[j])
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
    def gate_backward(dm, a, b, x, y, de, dx, dy):  # pragma: no cover - compiled
        """dE_raw = dm * a (written to de); G = dm * b goes straight into the L1 gradient (dx, dy) of each slice."""
        n_slices, la, lb = dm.shape
        d = x.shape[2]
        for s in prange(n_slices):
            g = np.empty((la, lb), dtype=x.dtype)
            size = la * lb
            _products(dm[s].reshape(size), a[s].reshape(size), b[s].reshape(size), de[s].reshape(size),
                      g.reshape(size))
            yt = np.empty((d, lb), dtype=x.dtype)
            dyt = np.empty((d, lb), dtype=x.dtype)
            _l1_grad_slice(x[s], y[s], g, dx[s], dy[s], yt, dyt)
