"""A CPU stand-in for vLLM's `indexer_k_quant_and_cache`, for CI machines where vllm cannot import.

It has the op's signature (mla_door/adapters/vllm_indexer_cache.py):

    indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt) -> None

k bf16 [num_tokens, 128], kv_cache uint8 [num_blocks, block_size, 132] written in place, int64
slot_mapping (a slot < 0 skips its token), quant_block_size 128, scale_fmt "ue8m0" (the only one
V3.2's checkpoints use; any other word: a float32 scale). Per token, in float32 as the CUDA
kernel: s = max(amax, 1e-4) / 448, ue8m0 rounds s up to a power of two, codes = e4m3(k / s)
to nearest even, saturated to 448; within a block every token's 128 codes first, then every
token's float32 scale.

`ops(bug)` returns the API with one deliberate bug (BUGS), for the red examples.
"""
from __future__ import annotations

import math
import struct
import types
from typing import Optional

import torch

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "scale_after_each_token": "lays each token out as [128 codes | its scale], the MLA cache's habit, not the block's scale area",
    "clamp_after_divide": "clamps the scale, not amax: max(amax / 448, 1e-4), the MLA writer's recipe",
    "writes_skipped_slots": "treats a negative slot as an index from the end of the cache instead of skipping it",
}

DIM, TOKEN_BYTES = 128, 132


def _positive_e4m3():
    """(values, codes) of the finite non-negative e4m3fn codes 0x00..0x7E, ascending."""
    vals = []
    for c in range(0x7F):
        e, m = c >> 3, c & 7
        vals.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return vals


_VALUES = _positive_e4m3()


def _encode(x: float) -> int:
    """The nearest e4m3fn code of a float32 value, ties to the even code, saturated to +-448."""
    sign = 0x80 if (x < 0 or (x == 0 and math.copysign(1.0, x) < 0)) else 0
    a = min(abs(x), 448.0)
    lo = 0
    hi = len(_VALUES) - 1
    while hi - lo > 1:  # the last code whose value <= a
        mid = (lo + hi) // 2
        if _VALUES[mid] <= a:
            lo = mid
        else:
            hi = mid
    if _VALUES[hi] <= a:
        lo = hi
    if lo == len(_VALUES) - 1:
        return sign | lo
    d_lo, d_hi = a - _VALUES[lo], _VALUES[lo + 1] - a
    code = lo if d_lo < d_hi else lo + 1 if d_hi < d_lo else (lo if lo % 2 == 0 else lo + 1)
    return sign | code


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _ue8m0(s: float) -> float:
    """The smallest power of two >= s (s > 0)."""
    m, e = math.frexp(s)
    return 2.0 ** (e - 1) if m == 0.5 else 2.0 ** e


def ops(bug: Optional[str] = None):
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    def indexer_k_quant_and_cache(k, kv_cache, slot_mapping, quant_block_size, scale_fmt):
        assert quant_block_size == DIM and k.shape[-1] == DIM and kv_cache.shape[-1] == TOKEN_BYTES
        num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
        flat = kv_cache.view(num_blocks, block_size * TOKEN_BYTES)
        keys = k.float()
        for t in range(k.shape[0]):
            slot = int(slot_mapping[t])
            if slot < 0:
                if bug != "writes_skipped_slots":
                    continue
                slot += num_blocks * block_size
            blk, off = divmod(slot, block_size)
            row = keys[t]
            amax = float(row.abs().max())
            if bug == "clamp_after_divide":
                s = max(_f32(amax / 448.0), _f32(1e-4))
            else:
                s = _f32(max(amax, _f32(1e-4)) / 448.0)
            if scale_fmt == "ue8m0":
                s = _ue8m0(s)
            q = (row / torch.tensor(s, dtype=torch.float32)).tolist()
            codes = torch.tensor([_encode(v) for v in q], dtype=torch.uint8)
            scale = torch.tensor(list(struct.pack("<f", s)), dtype=torch.uint8)
            if bug == "scale_after_each_token":
                flat[blk, off * TOKEN_BYTES:off * TOKEN_BYTES + DIM] = codes
                flat[blk, off * TOKEN_BYTES + DIM:(off + 1) * TOKEN_BYTES] = scale
            else:
                flat[blk, off * DIM:(off + 1) * DIM] = codes
                flat[blk, block_size * DIM + off * 4:block_size * DIM + off * 4 + 4] = scale

    return types.SimpleNamespace(__version__=__version__, BACKEND=BACKEND,
                                 indexer_k_quant_and_cache=indexer_k_quant_and_cache)
