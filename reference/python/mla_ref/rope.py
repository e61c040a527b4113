"""Rotary embedding with YaRN frequency correction (upstream `precompute_freqs_cis`), in float64.

Upstream computes the table in float32; the truth pipeline computes it in float64 (the float32 table
differs by up to 6e-4 in angle near position 16383: docs/field.md, "Upstream semantics"). The fp32
and bf16 pipelines use cos/sin of the float64 angle rounded to float32 (SCHEMA.md, "Pipelines").
"""
from __future__ import annotations

import math

import numpy as np

from .config import ModelArgs


def find_correction_dim(num_rotations: float, dim: int, base: float, max_seq_len: int) -> float:
    return dim * math.log(max_seq_len / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def find_correction_range(low_rot: float, high_rot: float, dim: int, base: float, max_seq_len: int):
    low = math.floor(find_correction_dim(low_rot, dim, base, max_seq_len))
    high = math.ceil(find_correction_dim(high_rot, dim, base, max_seq_len))
    return max(low, 0), min(high, dim - 1)


def linear_ramp(lo: float, hi: float, n: int) -> np.ndarray:
    if lo == hi:
        hi += 0.001
    f = (np.arange(n, dtype=np.float64) - lo) / (hi - lo)
    return np.clip(f, 0.0, 1.0)


def inv_freq(args: ModelArgs) -> np.ndarray:
    """float64 [rope/2]: base^(-2i/dim), YaRN-corrected when max_seq_len > original_seq_len."""
    dim = args.qk_rope_head_dim
    freqs = 1.0 / (args.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if args.yarn:
        low, high = find_correction_range(args.beta_fast, args.beta_slow, dim, args.rope_theta, args.original_seq_len)
        smooth = 1.0 - linear_ramp(low, high, dim // 2)
        freqs = freqs / args.rope_factor * (1.0 - smooth) + freqs * smooth
    return freqs


def angles(args: ModelArgs, start_pos: int, seqlen: int) -> np.ndarray:
    """float64 [seqlen, rope/2]: pos * inv_freq[i]."""
    pos = np.arange(start_pos, start_pos + seqlen, dtype=np.float64)
    return np.outer(pos, inv_freq(args))
