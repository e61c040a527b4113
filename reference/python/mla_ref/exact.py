"""Correctly rounded elementary functions for the numbers that define a case.

The RoPE inverse frequencies, the YaRN correction range and ramp, the softmax scale (with its
mscale factor) and the RoPE cos/sin tables are part of what a golden case *is*: they must come
out bit for bit the same under any numpy, torch, libm or CPU. Library `pow`/`log`/`exp`/`cos`
are only faithfully rounded and differ in the last bit between versions (numpy's SIMD `power`
does). So each value here is computed from its float64 arguments in decimal arithmetic with
PREC significant digits (Python's `decimal`, whose ln/exp/sqrt are correctly rounded at that
precision) and rounded once to the nearest float64. The result is the float64 nearest to the
exact real value unless that value lies within 10^-(PREC-2) relative of a rounding midpoint,
which does not happen for the few hundred values a catalog needs (and would be deterministic
anyway: the algorithm is fixed, not the platform's).
"""
from __future__ import annotations

import decimal
import functools
import math
from decimal import Decimal

import numpy as np

PREC = 60
_CTX = decimal.Context(prec=PREC + 10, rounding=decimal.ROUND_HALF_EVEN, Emin=-999999, Emax=999999)
# pi to 80 digits (the real constant; Decimal has no builtin)
_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899")


def _d(x) -> Decimal:
    """A float64 (or int) as the exact Decimal it denotes."""
    if isinstance(x, Decimal):
        return x
    if isinstance(x, (int, np.integer)):
        return Decimal(int(x))
    return Decimal(float(x))  # exact: every float64 is a finite decimal


def to_float(d: Decimal) -> float:
    """The float64 nearest to d (round half to even): float(str) is correctly rounded."""
    return float(d)


def ln(x) -> Decimal:
    return _CTX.ln(_d(x))


def exp(x) -> Decimal:
    return _CTX.exp(_d(x))


def sqrt(x) -> Decimal:
    return _CTX.sqrt(_d(x))


def pow_(base, e) -> Decimal:
    """base^e for base > 0 as exp(e·ln base) (decimal's ln and exp are correctly rounded)."""
    return _CTX.exp(_CTX.multiply(_d(e), ln(base)))


def pi() -> Decimal:
    return +_PI


def _sin_cos(x: Decimal):
    """(sin x, cos x) by reduction modulo pi/2 with 80-digit pi, then Taylor series."""
    with decimal.localcontext(_CTX) as c:
        c.prec = PREC + 20
        half_pi = _PI / 2
        k = int((x / half_pi).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))
        r = x - k * half_pi  # |r| <= pi/4
        r2 = r * r
        s, t, n = Decimal(0), r, 1
        while t != 0 and abs(t) > Decimal(10) ** (-(PREC + 15)):
            s += t
            t = -t * r2 / ((n + 1) * (n + 2))
            n += 2
        co, t, n = Decimal(0), Decimal(1), 0
        while t != 0 and abs(t) > Decimal(10) ** (-(PREC + 15)):
            co += t
            t = -t * r2 / ((n + 1) * (n + 2))
            n += 2
        q = k % 4
        if q == 0:
            return s, co
        if q == 1:
            return co, -s
        if q == 2:
            return -s, -co
        return -co, s


@functools.lru_cache(maxsize=None)
def sin_cos_f64(x: float):
    """(sin, cos) of the float64 x, each correctly rounded to float64."""
    s, c = _sin_cos(_d(x))
    return to_float(s), to_float(c)


def cos_sin_array(angles: np.ndarray):
    """Elementwise correctly rounded (cos, sin) of a float64 array."""
    a = np.asarray(angles, dtype=np.float64)
    flat = a.reshape(-1)
    cs = np.empty(flat.shape, dtype=np.float64)
    sn = np.empty(flat.shape, dtype=np.float64)
    for i, x in enumerate(flat.tolist()):
        sn[i], cs[i] = sin_cos_f64(x)
    return cs.reshape(a.shape), sn.reshape(a.shape)


def inv_sqrt(n) -> float:
    """n^-1/2 correctly rounded (the plain softmax scale (nope+rope)^-0.5)."""
    return to_float(_CTX.divide(Decimal(1), sqrt(n)))


def floor_real(d: Decimal) -> int:
    return int(d.to_integral_value(rounding=decimal.ROUND_FLOOR))


def ceil_real(d: Decimal) -> int:
    return int(d.to_integral_value(rounding=decimal.ROUND_CEILING))


def self_check() -> None:
    """Cheap sanity against the platform (faithful) libm: within one ulp."""
    for x in (0.5, 1.0, 3.0, 16383.0 * 1e-4, 100.0):
        s, c = sin_cos_f64(x)
        assert abs(s - math.sin(x)) <= math.ulp(s) and abs(c - math.cos(x)) <= math.ulp(c)


# ---------------------------------------------------------------- library-independent float64 GEMM
#
# A float64 matmul through BLAS sums in whatever order the library picks (blocking, SIMD width,
# threads), so its last bits differ between torch/numpy builds: ~sqrt(K)·2^-53 relative, which
# over 576..131072-term sums moved the fp64 truth by up to 0.006 of its 1e-12 bound between
# torch 1.13 and 2.x. Here each operand is split at a power-of-two grid into hi + lo: hi holds
# beta bits per row of A (per column of B) relative to that row's (column's) power-of-two
# ceiling sigma, so hi_A·hi_B is a sum of integers times one scale that never exceeds 2^53 —
# exact in any summation order — and it carries all but ~2^-beta of the result. The two
# remainder products (A_hi·B_lo + A_lo·B) are rounded by BLAS, but their own rounding is then
# ~2^-beta·sqrt(K)·2^-53 relative: far below one ulp of the result. The final hi + rest is one
# float64 addition. So every library gives the same result, but for a final rounding that sits
# within ~1e-6 ulp of a midpoint (rare, and then one ulp).

def _beta(k: int) -> int:
    """Bits per hi slice so that k products of two beta-bit integers sum below 2^53."""
    return max(1, (53 - max(1, int(k - 1).bit_length())) // 2)


def _split(x, dim: int, beta: int):
    """x = hi + lo exactly; hi on the grid sigma·2^-beta, sigma = 2^ceil(log2 max|x|) along `dim`."""
    import torch
    amax = x.abs().amax(dim=dim, keepdim=True)
    amax = torch.where(torch.isfinite(amax) & (amax > 0), amax, torch.ones_like(amax))
    _, e = torch.frexp(amax)  # amax < 2^e
    grid = torch.ldexp(torch.ones_like(amax), (e - beta).to(torch.int32)) if hasattr(torch, "ldexp") else \
        torch.pow(torch.full_like(amax, 2.0), (e - beta).to(amax.dtype))
    hi = torch.round(x / grid) * grid  # power-of-two scaling: exact; round is half to even
    return hi, x - hi


class SplitB:
    """A right-hand operand split once (a weight used in many products)."""

    def __init__(self, b):
        import torch
        assert b.dtype == torch.float64 and bool(torch.isfinite(b).all())
        self.b = b.contiguous()
        self.beta = _beta(b.shape[-2])
        self.hi, self.lo = _split(self.b, -2, self.beta)


def matmul(a, b):
    """a [..., M, K] @ b [..., K, N] for float64 torch tensors, independent of the BLAS (see above).
    `b` may be a SplitB. Non-finite inputs fall back to the plain product (they never occur in a
    truth computation)."""
    import torch
    assert a.dtype == torch.float64
    k = a.shape[-1]
    if isinstance(b, SplitB):
        sb = b
    else:
        assert b.dtype == torch.float64
        if k == 0 or not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            return torch.matmul(a, b)
        sb = None
    beta = _beta(k)
    if sb is not None:
        if k == 0 or not torch.isfinite(a).all():
            return torch.matmul(a, sb.b)
        assert sb.beta == beta
        b, b_hi, b_lo = sb.b, sb.hi, sb.lo
    else:
        b_hi, b_lo = _split(b, -2, beta)
    a_hi, a_lo = _split(a, -1, beta)
    exact_part = torch.matmul(a_hi, b_hi)
    rest = torch.matmul(a_hi, b_lo) + torch.matmul(a_lo, b)
    return exact_part + rest


def fsum_rows(x) -> np.ndarray:
    """Correctly rounded sums along the last axis (math.fsum), float64."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    out = np.fromiter((math.fsum(r) for r in flat), dtype=np.float64, count=flat.shape[0])
    return out.reshape(x.shape[:-1])
