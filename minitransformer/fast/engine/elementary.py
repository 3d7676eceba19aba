r"""Elementary functions written out for the compiled loops: :math:`e^x` of a non-positive
float64 or float32, and :math:`\Phi` (the normal CDF, the exact GELU's) of a float32.

A compiled loop that calls the C library's ``exp`` or ``erf`` per element is not
vectorised: the compiler cannot put a library call into SIMD lanes. Written as a range
reduction, polynomials and a power of two built from its exponent bits, each of these is a
few dozen multiply-adds that it does vectorise. Each has a documented error bound, tested
against NumPy or SciPy on a dense grid (``tests/fast``). They are Numba functions
(inlined into the loops of :mod:`minitransformer.fast.engine.compiled` and
:mod:`minitransformer.fast.fused_attention`), or plain Python without Numba.
"""
from __future__ import annotations

import math
import os

import numpy as np

try:  # as minitransformer.fast.engine.compiled decides: MINITRANSFORMER_NUMBA=0 turns Numba off
    if os.environ.get("MINITRANSFORMER_NUMBA", "1").strip() == "0":
        raise ImportError("turned off by MINITRANSFORMER_NUMBA=0")
    import numba
except ImportError:
    numba = None


# ---------------------------------------------------------------------------
# 2^n from the exponent bits
# ---------------------------------------------------------------------------
def _power_of_two_from_bits(width: int):
    """An intrinsic ``2^n`` for an int of ``width`` bits (32 or 64) and a normal result: the float
    of that width whose exponent field is n + its bias (127 or 1023), mantissa 0."""
    bias, mantissa = {32: (127, 23), 64: (1023, 52)}[width]
    if numba is None:
        as_float = np.float32 if width == 32 else float
        return lambda n: as_float(math.ldexp(1.0, int(n)))

    def power_of_two(typingctx, n):
        from llvmlite import ir

        def codegen(context, builder, signature, args):
            bits = builder.shl(builder.add(args[0], ir.Constant(ir.IntType(width), bias)),
                               ir.Constant(ir.IntType(width), mantissa))
            return builder.bitcast(bits, ir.FloatType() if width == 32 else ir.DoubleType())
        types_ = (numba.float32, numba.int32) if width == 32 else (numba.float64, numba.int64)
        return types_[0](types_[1]), codegen
    return numba.extending.intrinsic(power_of_two)



# ---------------------------------------------------------------------------
# The exponential of a non-positive float64, written out so that loops vectorise
# ---------------------------------------------------------------------------
# A loop that calls NumPy's exp per element calls the C library once each: not
# vectorised. For x <= 0 in float64: n = rint(x log2 e), r = x - n ln 2 in two parts
# (Cody and Waite; |r| <= 0.3466), e^r by its Taylor polynomial of degree 12
# (remainder below |r|^13 e^|r| / 13! < 2.4e-16), and 2^n built from its exponent
# bits. Relative error at most EXP_RELATIVE_ERROR, rounding included (tested against
# numpy.exp on a dense grid); 0 below EXP_FLOOR (the true value is below 1e-304, and
# a float32 probability rounds it to 0 anyway).
EXP_FLOOR = -700.0  # below: exp gives 0
EXP_RELATIVE_ERROR = 1e-15  # the bound exp_nonpositive is tested to
LOG2_E = 1.4426950408889634
LN2_HIGH = 6.93147180369123816490e-01  # ln 2 in two parts: n * LN2_HIGH is exact for |n| < 2^20
LN2_LOW = 1.90821492927058770002e-10

_power_of_two = _power_of_two_from_bits(64)  # 2^n for an int64 n in [-1022, 1023], a float64


def exp_nonpositive(x):
    """e^x for float64 x <= 0, to a relative error of at most EXP_RELATIVE_ERROR (1e-15;
    the notes above say how); 0 below EXP_FLOOR (and for -inf); x must not be NaN."""
    if x < EXP_FLOOR:
        return 0.0
    n = np.rint(x * LOG2_E)
    r = (x - n * LN2_HIGH) - n * LN2_LOW  # |r| <= 0.3466
    e = 1.0 + r * (1.0 + r * (1 / 2 + r * (1 / 6 + r * (1 / 24 + r * (1 / 120 + r * (1 / 720 + r * (
        1 / 5040 + r * (1 / 40320 + r * (1 / 362880 + r * (1 / 3628800 + r * (1 / 39916800 + r * (
            1 / 479001600))))))))))))
    return e * _power_of_two(np.int64(n))


if numba is not None:
    exp_nonpositive = numba.njit(cache=True)(exp_nonpositive)


# ---------------------------------------------------------------------------
# Phi of a float32, in float32 arithmetic and without a table
# ---------------------------------------------------------------------------
# Phi(x) = (1 + erf(z)) / 2 with z = x / sqrt 2, from two polynomials, both evaluated and one
# selected, so that the loop has neither a branch nor a table lookup (a gather) and is vectorised:
#
# * |z| <= 1/2: erf(z) = z P(z^2), P of degree 4;
# * |z| > 1/2: erfc(|z|) = e^{-z^2} erfcx(|z|), and the scaled erfc, erfcx(a) = e^{a^2} erfc(a)
#   (smooth, between 0 and 1), is a polynomial of degree 8 in s = (a - 5/2) / (a + 5/2), which maps
#   a in [1/2, oo) into [-2/3, 1); then Phi = erfc/2 for z < 0 and 1 - erfc/2 for z > 0.
#
# The coefficients are least-squares fits in the Chebyshev basis, rounded to float32 (P on
# z in [0, 1/2], erfcx on a in [1/2, 9.4]; beyond 9.4, e^{-z^2} is 0 in float32):
# numpy.polynomial.chebyshev.chebfit against scipy.special.erf and erfcx, converted with cheb2poly.
# Their own error is below 6.1e-8 (P, relative) and 1.9e-8 (erfcx, absolute): float32's rounding of the
# arithmetic is the larger part of the bound. e^{-z^2} = 2^n e^r with n = rint(-z^2 log2 e),
# |r| <= ln2/2, e^r by its degree-7 Taylor polynomial and 2^n written into a float32's
# exponent bits (_power_of_two_32). One division (s) per element, where Cody's rational forms,
# the compiled GELU loop's earlier basis, took three: 1.9 against 3.2 ms on one thread for (4096, 256).
# Measured bound (a dense grid of [-20, 20] against SciPy in float64): documented and tested as
# GELU32_Y_BOUND, GELU32_DYDX_BOUND.
GELU32_Y_BOUND = 2e-7  # |y~ - y| <= GELU32_Y_BOUND |x|
GELU32_DYDX_BOUND = 2e-7  # |dy~/dx - dy/dx| <= GELU32_DYDX_BOUND
_F = np.float32
_ERF_SMALL = tuple(_F(c) for c in (1.1283791065216064, -0.37612617015838623, 0.11282992362976074,
                                   -0.02676931954920292, 0.004744758829474449))  # erf(z)/z in z^2, |z| <= 1/2
_ERFCX = tuple(_F(c) for c in (0.21080636978149414, -0.37173667550086975, 0.25171318650245667,
                               -0.12503555417060852, 0.03992299735546112, -0.003968363627791405,
                               -0.00264418451115489, 0.0007797113503329456, 0.00021977501455694437))  # in s
_ERFCX_CENTRE = _F(2.5)  # s = (a - 5/2) / (a + 5/2)
_SQRT_HALF = _F(0.7071067811865476)
ONE_OVER_SQRT_2PI_32 = _F(0.3989422804014327)  # the normal density's factor, for the GELU's dy/dx
_LOG2_E, _LN2_HIGH, _LN2_LOW = _F(1.4426950408889634), _F(0.693145751953125), _F(1.428606765330187045e-06)
_EXP_TERMS = tuple(_F(1.0 / math.factorial(i)) for i in range(1, 8))  # 1/1! .. 1/7!
_ZERO, _HALF, _ONE = _F(0.0), _F(0.5), _F(1.0)
_SMALL, _UNDERFLOW, _ERFC_ZERO = _F(0.5), _F(87.0), _F(10.0)  # e^{-z^2} is 0 from |z| = 9.33

_power_of_two_32 = _power_of_two_from_bits(32)  # 2^n for an int32 n in [-126, 127], a float32


def exp32_nonpositive(v):
    r""":math:`e^v` of one float32 :math:`v \le 0` in float32 arithmetic: :math:`2^n e^r` with
    :math:`n = \mathrm{rint}(v \log_2 e)`, :math:`r = v - n\ln 2` in two parts (:math:`|r| \le \ln 2/2`), :math:`e^r`
    by its degree-7 Taylor polynomial and :math:`2^n` written into the exponent bits. 0 from -87
    down (where float32 leaves its normal numbers) and for :math:`-\infty`; NaN gives NaN."""
    w = max(v, -_UNDERFLOW)
    n = np.rint(w * _LOG2_E)
    r = (w - n * _LN2_HIGH) - n * _LN2_LOW
    c = _EXP_TERMS
    e = (_ONE + r * (c[0] + r * (c[1] + r * (c[2] + r * (c[3] + r * (c[4] + r * (c[5] + r * c[6]))))))) \
        * _power_of_two_32(np.int32(n))
    e = e if v > -_UNDERFLOW else _ZERO
    return e if v == v else v


if numba is not None:
    # fused multiply-adds (one rounding each, nothing regrouped) in its polynomial: within the same bound
    exp32_nonpositive = numba.njit(cache=True, error_model="numpy", fastmath={"contract"})(exp32_nonpositive)


def gelu32(x):
    r"""(:math:`\Phi(x)`, :math:`e^{-x^2/2}`) of one float32 x, in float32 arithmetic (the notes above).
    NaN gives NaN; the GELU's y is :math:`x\Phi` and its dy/dx :math:`\Phi + x e/\sqrt{2\pi}`
    (:data:`ONE_OVER_SQRT_2PI_32` is that factor)."""
    z = x * _SQRT_HALF
    a = abs(z)
    a2 = a * a
    e = exp32_nonpositive(-a2)  # e^{-z^2}
    # |z| <= 1/2: erf(z) = z P(z^2)
    w = min(a2, _SMALL * _SMALL)
    p = _ERF_SMALL
    erf_small = z * (p[0] + w * (p[1] + w * (p[2] + w * (p[3] + w * p[4]))))
    # |z| > 1/2: erfc(|z|) = e erfcx(|z|), erfcx a polynomial in s
    u = min(max(a, _SMALL), _ERFC_ZERO)  # clamped: s stays finite for |z| = inf, where e is 0
    s = (u - _ERFCX_CENTRE) / (u + _ERFCX_CENTRE)
    k = _ERFCX
    scaled = k[0] + s * (k[1] + s * (k[2] + s * (k[3] + s * (k[4] + s * (k[5] + s * (k[6] + s * (
        k[7] + s * k[8])))))))
    half_erfc = _HALF * e * scaled  # erfc(|z|) / 2
    tail = half_erfc if z < _ZERO else _ONE - half_erfc
    cdf = _HALF + _HALF * erf_small if a <= _SMALL else tail
    return cdf, e


if numba is not None:
    gelu32 = numba.njit(cache=True, error_model="numpy", fastmath={"contract"})(gelu32)  # as exp32_nonpositive


