"""Rotary embedding with YaRN frequency correction (upstream `precompute_freqs_cis`), in float64.

Upstream computes the table in float32; the truth pipeline computes it in float64 (the float32 table
differs by up to 6e-4 in angle near position 16383: docs/field.md, "Upstream semantics"). The fp32
and bf16 pipelines use cos/sin of the float64 angle rounded to float32 (SCHEMA.md, "Pipelines").

Every number here defines a case, so none comes from the installed library's pow/log/cos: the
correction range, the frequencies and cos/sin are the float64 values nearest to the exact real
ones (mla_ref.exact), identical under any numpy/torch/libm.
"""
from __future__ import annotations

import functools

import numpy as np

from . import exact

from .config import ModelArgs


def _correction_dim_exact(num_rotations: float, dim: int, base: float, max_seq_len: int):
    """dim·ln(max_seq_len / (num_rotations·2π)) / (2·ln(base)), as an exact-precision Decimal."""
    num = exact.ln(exact._CTX.divide(exact._d(max_seq_len), exact._CTX.multiply(exact._d(num_rotations), 2 * exact.pi())))
    return exact._CTX.divide(exact._CTX.multiply(exact._d(dim), num), 2 * exact.ln(base))


def find_correction_dim(num_rotations: float, dim: int, base: float, max_seq_len: int) -> float:
    return exact.to_float(_correction_dim_exact(num_rotations, dim, base, max_seq_len))


def find_correction_range(low_rot: float, high_rot: float, dim: int, base: float, max_seq_len: int):
    """(max(floor(corr(low_rot)), 0), min(ceil(corr(high_rot)), dim - 1)), floor/ceil of the exact
    real value (upstream takes them of a float64 approximation: the same integers unless that is
    within an ulp of an integer)."""
    low = exact.floor_real(_correction_dim_exact(low_rot, dim, base, max_seq_len))
    high = exact.ceil_real(_correction_dim_exact(high_rot, dim, base, max_seq_len))
    return max(low, 0), min(high, dim - 1)


def _ramp_exact(lo: float, hi: float, i: int):
    """clamp((i - lo) / (hi - lo), 0, 1) as a Decimal; hi += 0.001 (float64) when lo == hi."""
    if lo == hi:
        hi = float(hi) + 0.001
    r = exact._CTX.divide(exact._d(i) - exact._d(lo), exact._d(hi) - exact._d(lo))
    return min(max(r, exact.Decimal(0)), exact.Decimal(1))


def linear_ramp(lo: float, hi: float, n: int) -> np.ndarray:
    return np.array([exact.to_float(_ramp_exact(lo, hi, i)) for i in range(n)], dtype=np.float64)


@functools.lru_cache(maxsize=None)
def _inv_freq(dim: int, theta: float, yarn: bool, beta_fast: float, beta_slow: float, original_seq_len: int,
              factor: float) -> tuple:
    out = []
    if yarn:
        low, high = find_correction_range(beta_fast, beta_slow, dim, theta, original_seq_len)
    for i in range(dim // 2):
        f = exact.pow_(theta, exact._CTX.divide(exact.Decimal(-2 * i), exact.Decimal(dim)))  # theta^(-2i/dim)
        if yarn:
            # upstream: f / factor * (1 - smooth) + f * smooth, smooth = 1 - ramp
            smooth = 1 - _ramp_exact(low, high, i)
            f = exact._CTX.add(exact._CTX.multiply(exact._CTX.divide(f, exact._d(factor)), 1 - smooth),
                               exact._CTX.multiply(f, smooth))
        out.append(exact.to_float(f))
    return tuple(out)


def inv_freq(args: ModelArgs) -> np.ndarray:
    """float64 [rope/2]: base^(-2i/dim), YaRN-corrected when max_seq_len > original_seq_len;
    each entry the float64 nearest to the exact real value."""
    return np.array(_inv_freq(args.qk_rope_head_dim, float(args.rope_theta), bool(args.yarn), float(args.beta_fast),
                              float(args.beta_slow), int(args.original_seq_len), float(args.rope_factor)),
                    dtype=np.float64)


def angles(args: ModelArgs, start_pos: int, seqlen: int) -> np.ndarray:
    """float64 [seqlen, rope/2]: pos * inv_freq[i] (one float64 multiplication each)."""
    pos = np.arange(start_pos, start_pos + seqlen, dtype=np.float64)
    return np.outer(pos, inv_freq(args))


def cos_sin(args: ModelArgs, start_pos: int, seqlen: int):
    """(cos, sin) [seqlen, rope/2] of the float64 angles, each correctly rounded to float64."""
    return exact.cos_sin_array(angles(args, start_pos, seqlen))
