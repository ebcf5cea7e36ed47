"""Float and int constants of the numba kernels' vectorised activations (``numba_cpu._exp_row``, ``_activate``).

Plain Python (no numba): the arrays travel into the kernels as arguments, so their values are in the dtype of the
kernel (no float64 promotion inside float32 kernels). A leaf of the kernels package.
"""

from __future__ import annotations

import math

import numpy as np

# tanh below TANH_CUT (Cephes tanh.c / tanhf.c, ~1 ulp): x + x z R(z), z = x^2; R a rational P(z) / Q(z) of
# degrees 2 / 3 (Q monic) in float64, a polynomial of degree 4 in float32. Above the cut 1 - 2 / (exp(2|x|) + 1),
# whose cancellation near 0 (it lost all digits below ~1e-8 in float32) the cut avoids.
TANH_CUT = 0.625
TANH_P64 = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
TANH_Q64 = (1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)
TANH_P32 = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)


def exp_constants(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Float constants (in ``dtype``) and int ones for ``numba_cpu._exp_row`` and ``_activate``.

    Float, by index: 0 log2(e), 1-2 ln2 split hi/lo (hi has trailing zero bits so n * hi is exact), 3-4 the range
    [lo, hi] outside which exp is exactly 0 / inf (inside, exp and 1/exp are normal numbers: no denormals, which
    are ~100x slower), 5-8 0.5, 1, 2, inf, 9-22 the Taylor coefficients 1/13! ... 1/0! of exp on |r| <= ln2/2,
    23 ``TANH_CUT``, 24-29 tanh's P then Q (float64) or its polynomial, highest degree first, and a 0 (float32).
    Int (int32 for float32, int64 for float64): exponent bias and mantissa width, to build 2^n from its bits, and
    1 to use the degree-7 exp polynomial and tanh's float32 polynomial.
    """
    if np.dtype(dtype) == np.float32:  # degree 7: truncation error 0.3466^8 / 8! = 5e-9 < 2^-24
        head = [1.4426950408889634, 0.693359375, -2.12194440e-4, -87.0, 87.0]
        ints = np.array([127, 23, 1], dtype=np.int32)
        tanh = [TANH_CUT, *TANH_P32, 0.0]
    else:  # degree 13: 0.3466^14 / 14! = 4e-18 < 2^-53
        head = [1.4426950408889634, 6.93147180369123816490e-01, 1.90821492927058770002e-10, -708.0, 708.0]
        ints = np.array([1023, 52, 0], dtype=np.int64)
        tanh = [TANH_CUT, *TANH_P64, *TANH_Q64]
    taylor = [1.0 / math.factorial(n) for n in range(13, -1, -1)]
    return np.array(head + [0.5, 1.0, 2.0, math.inf] + taylor + tanh, dtype=dtype), ints
