"""A CPU stand-in for DeepGEMM's indexer logits calls, for CI machines where deep_gemm cannot import.

It has the API the adapter (mla_door/adapters/deepgemm.py) calls, as DeepGEMM's Python package
exposes it:

    get_num_sms() -> int
    get_paged_mqa_logits_metadata(context_lens, block_size, num_sms) -> schedule (a tensor)
    fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                         max_context_len, clean_logits=False) -> float32 [b * next_n, max_context_len]
    fp8_mqa_logits(q, (k_fp8, k_scales), weights, cu_seqlen_ks, cu_seqlen_ke,
                   clean_logits=True) -> float32 [rows, num_keys]

q and keys are float8_e4m3fn tensors where torch has that dtype, else uint8 codes (torch < 2.1);
kv_cache is uint8 [num_blocks, block_size, 1, 132] (per block every token's 128 codes, then every
token's float32 scale). Scores are sum_h relu(q_h . k) * w_h, times the key's scale, in float32.

Without clean_logits the real paged call leaves the positions past a row's horizon as its
blocks' arithmetic left them (vLLM calls it so, its top-k reading only the valid range); this
stand-in writes 0.0 there, a finite value the certifier's -inf rule catches.

`make(bug)` returns the API with one deliberate bug (BUGS), for the red examples.
"""
from __future__ import annotations

import struct
import types
from typing import Optional

import torch

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "no_relu": "sums q·k over the heads without the relu",
    "scale_after_each_token": "reads a paged key's scale from the 4 bytes after its codes, not from the block's scale area",
    "sees_next_token": "with next_n 2, lets the first query token see the second one's position",
}

TOKEN_BYTES = 132
DIM = 128


def _e4m3_table() -> torch.Tensor:
    """The float32 value of every e4m3fn code (4 exponent bits, bias 7; 3 mantissa bits; 0x7F and
    0xFF NaN; no infinities)."""
    values = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 0x7
        if e == 0xF and m == 0x7:
            values.append(float("nan"))
        elif e == 0:
            values.append(sign * m / 8.0 * 2.0 ** -6)
        else:
            values.append(sign * (1.0 + m / 8.0) * 2.0 ** (e - 7))
    return torch.tensor(values, dtype=torch.float32)


_E4M3 = _e4m3_table()


def _values(t: torch.Tensor) -> torch.Tensor:
    """float32 values of e4m3 data given as float8_e4m3fn or as uint8 codes."""
    if t.dtype == torch.uint8:
        return _E4M3[t.long()]
    return t.float()


def _scores(q8: torch.Tensor, w: torch.Tensor, k8: torch.Tensor, relu: bool) -> torch.Tensor:
    """[keys] = sum_h act(q8[h] . k8[p]) * w[h] for one query row (q8 [h, 128], k8 [keys, 128])."""
    dots = k8 @ q8.t()  # [keys, h]
    if relu:
        dots = torch.relu(dots)
    return dots @ w


def make(bug: Optional[str] = None):
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    def get_num_sms() -> int:
        return 1

    def get_paged_mqa_logits_metadata(context_lens, block_size, num_sms):
        # The real one splits the work over the SMs; one CPU "SM" takes every block.
        return torch.zeros((num_sms + 1, 2), dtype=torch.int32)

    def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False):
        b, next_n, h, d = q.shape
        assert d == DIM and kv_cache.shape[-1] == TOKEN_BYTES
        num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
        blocks = kv_cache.reshape(num_blocks, block_size * TOKEN_BYTES)
        qv = _values(q).reshape(b * next_n, h, d)
        out = torch.full((b * next_n, max_context_len), float("-inf") if clean_logits else 0.0, dtype=torch.float32)
        for s in range(b):
            ctx = int(context_lens[s])
            n_blk = (ctx + block_size - 1) // block_size
            codes, scales = [], []
            for j in range(n_blk):
                blk = blocks[int(block_table[s, j])]
                codes.append(blk[: block_size * DIM].reshape(block_size, DIM))
                if bug == "scale_after_each_token":
                    # Reads the 4 bytes after each token's codes as if tokens were [codes | scale].
                    tok = blk.reshape(block_size, TOKEN_BYTES)[:, DIM:]
                    scales.append(torch.tensor([struct.unpack("<f", bytes(t.tolist()))[0] for t in tok],
                                               dtype=torch.float32))
                else:
                    scales.append(blk[block_size * DIM:].clone().view(torch.float32))
            if n_blk == 0:
                continue
            k8 = _values(torch.cat(codes)[:ctx])
            ks = torch.cat(scales)[:ctx]
            for i in range(next_n):
                r = s * next_n + i
                horizon = ctx - next_n + i + 1
                if bug == "sees_next_token" and next_n == 2 and i == 0:
                    horizon += 1
                horizon = max(0, min(horizon, ctx))
                if horizon == 0:
                    continue
                sc = _scores(qv[r], weights[r].float(), k8[:horizon], bug != "no_relu") * ks[:horizon]
                out[r, :horizon] = sc
                if not clean_logits:
                    # The sequence's other keys, computed as the blocks are, unmasked.
                    out[r, horizon:ctx] = _scores(qv[r], weights[r].float(), k8[horizon:], bug != "no_relu") * ks[horizon:]
        return out

    def fp8_mqa_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits=True):
        k_fp8, k_scales = kv
        rows, h, d = q.shape
        assert d == DIM
        n = k_fp8.shape[0]
        qv, k8 = _values(q), _values(k_fp8)
        out = torch.full((rows, n), float("-inf") if clean_logits else 0.0, dtype=torch.float32)
        for r in range(rows):
            lo, hi = int(cu_seqlen_ks[r]), int(cu_seqlen_ke[r])
            if hi <= lo:
                continue
            out[r, lo:hi] = _scores(qv[r], weights[r].float(), k8[lo:hi], bug != "no_relu") * k_scales[lo:hi].float()
        return out

    return types.SimpleNamespace(__version__=__version__, BACKEND=BACKEND, get_num_sms=get_num_sms,
                                 get_paged_mqa_logits_metadata=get_paged_mqa_logits_metadata,
                                 fp8_paged_mqa_logits=fp8_paged_mqa_logits, fp8_mqa_logits=fp8_mqa_logits)
