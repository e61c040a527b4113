"""A torch MLA decode on the CPU in the suite's canonical conventions, and the parts it is made of.

    mla certify --python kernels/python/examples/torch_mla.py:KERNEL        # float32 output
    mla certify --python kernels/python/examples/torch_mla.py:KERNEL_BF16   # bfloat16 output

The decode has the one signature of `mla_door` (kernels/python/mla_door/__init__.py): it reads
q, the paged cache (bf16 or the 656-byte FP8 token, fixtures/SCHEMA.md), the block table and the
lengths, and writes every element of `out` and `lse` in place. Conventions are the suite's own:
natural-log lse laid out [b, h, s_q], an empty row gives out 0 and lse +inf, sparse indices are
positions in the sequence and anything outside [0, L) is invalid (skipped, never read).

Math is float32 throughout (q and the keys as float32 values, float32 products, sums, softmax),
so its precision class is f32 operands / f32 accumulation; the output is float32 or rounded to
bfloat16 once at the end.

The parts are functions so that the stand-ins of other libraries (standin_flash_mla.py,
standin_flashinfer.py) compute through the same math and differ only in their API and
conventions:
    e4m3_table()           the 256 float8 e4m3fn values, built from the bit definition
    token_values(tokens)   cache tokens (bytes) -> float32 [n, 576]
    slots_of_positions()   logical positions of one sequence -> global cache slots
    gather_slots()         global cache slots -> the token bytes stored there
    attend()               softmax attention of query rows over one gathered key set
    decode_rows()          the canonical dense/sparse decode over a whole batch
(torch 1.13 has no float8 dtype, so the FP8 latent is decoded through the table.)
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

import mla_door
from mla_door import D_QK, D_V, BF16_TOKEN_BYTES, FP8_TOKEN_BYTES

_FP8_LATENT = 512          # e4m3 bytes per token
_FP8_SCALES = 4            # float32 scales per token, one per 128 latent values
_FP8_BLOCK = 128
_FP8_ROPE_AT = _FP8_LATENT + 4 * _FP8_SCALES   # 528: the 64 bf16 rope values follow


def e4m3_value(code: int) -> float:
    """The value of one float8 e4m3fn code: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa
    bits; exponent 0 is subnormal (m/8 · 2^-6); no infinities; 0x7F and 0xFF are NaN."""
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    if e == 0:
        return sign * math.ldexp(m, -9)
    return sign * math.ldexp(8 + m, e - 10)   # (1 + m/8) · 2^(e-7)


_E4M3 = None


def e4m3_table() -> torch.Tensor:
    """float32 [256]: entry c is the value of code c (every value is exact in float32)."""
    global _E4M3
    if _E4M3 is None:
        _E4M3 = torch.tensor([e4m3_value(c) for c in range(256)], dtype=torch.float32)
    return _E4M3


def token_bytes(kv_cache: torch.Tensor) -> int:
    """Bytes per token of a cache [num_blocks, page_size, bytes] (uint8), checked."""
    if kv_cache.dtype != torch.uint8 or kv_cache.dim() != 3:
        raise ValueError(f"kv_cache must be uint8 [num_blocks, page_size, bytes], got "
                         f"{kv_cache.dtype} {list(kv_cache.shape)}")
    n = kv_cache.shape[2]
    if n not in (BF16_TOKEN_BYTES, FP8_TOKEN_BYTES):
        raise ValueError(f"{n} bytes per token: neither the bf16 ({BF16_TOKEN_BYTES}) nor the "
                         f"FP8 ({FP8_TOKEN_BYTES}) layout")
    return n


def token_values(tokens: torch.Tensor) -> torch.Tensor:
    """Cache tokens uint8 [n, 1152 or 656] -> float32 [n, 576] (latent 512 | rope 64).

    bf16 tokens: the 576 bfloat16 values, exactly. FP8 tokens (fixtures/SCHEMA.md, "The FP8
    cache layout"): latent = e4m3 value · its block's float32 scale (a float32 product, one
    rounding), rope = the 64 bfloat16 values exactly."""
    n, width = tokens.shape
    tokens = tokens.contiguous()
    if width == BF16_TOKEN_BYTES:
        return tokens.view(torch.bfloat16).float()
    if width != FP8_TOKEN_BYTES:
        raise ValueError(f"{width} bytes per token is no cache layout")
    codes = tokens[:, :_FP8_LATENT].long()
    latent = e4m3_table()[codes]
    scales = tokens[:, _FP8_LATENT:_FP8_ROPE_AT].contiguous().view(torch.float32)   # [n, 4]
    latent = latent * scales.repeat_interleave(_FP8_BLOCK, dim=1)
    rope = tokens[:, _FP8_ROPE_AT:].contiguous().view(torch.bfloat16).float()
    return torch.cat([latent, rope], dim=1)


def slots_of_positions(block_table_row: torch.Tensor, positions: torch.Tensor,
                       page_size: int) -> torch.Tensor:
    """Logical positions of one sequence -> global slots `block · page_size + offset` (int64).
    The positions must be valid (0 <= p < L): only the block-table entries they name are read."""
    positions = positions.long()
    blocks = block_table_row.long()[positions // page_size]
    return blocks * page_size + positions % page_size


def gather_slots(kv_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The token bytes [n, bytes] stored at global slots `block · page_size + offset`."""
    nb, ps, width = kv_cache.shape
    slots = slots.long()
    if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= nb * ps):
        raise IndexError(f"cache slot out of range [0, {nb * ps}): "
                         f"{int(slots.min())}..{int(slots.max())}")
    return kv_cache.reshape(nb * ps, width)[slots]


def attend(q_rows: torch.Tensor, keys: torch.Tensor, softmax_scale: float,
           visible: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention of query rows over one key set, float32.

    q_rows float32 [m, 576], keys float32 [n, 576] (V = their first 512 columns), visible bool
    [m, n] or None (all). Returns out float32 [m, 512] and the natural-log lse float32 [m]; a
    row that sees no key has out 0 and lse +inf. Scores are (q·k) · float32(softmax_scale)."""
    m, n = q_rows.shape[0], keys.shape[0]
    out = torch.zeros(m, D_V, dtype=torch.float32)
    lse = torch.full((m,), math.inf, dtype=torch.float32)
    if m == 0 or n == 0:
        return out, lse
    scale = torch.tensor(softmax_scale, dtype=torch.float32)
    s = (q_rows @ keys.t()) * scale
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    mx = s.max(dim=1).values
    live = torch.isfinite(mx) if visible is None else visible.any(dim=1)
    if not bool(live.any()):
        return out, lse
    s, mx = s[live], mx[live]
    e = torch.exp(s - mx[:, None])
    total = e.sum(dim=1)
    out[live] = (e / total[:, None]) @ keys[:, :D_V]
    lse[live] = mx + torch.log(total)
    return out, lse


def decode_rows(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                cache_seqlens: torch.Tensor, indices: Optional[torch.Tensor],
                softmax_scale: float, causal: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """The canonical decode over a batch: returns out float32 [b, s_q, h, 512] and the natural
    lse float32 [b, h, s_q].

    Dense (indices None): sequence i attends to its positions 0..L-1; with causal and s_q > 1,
    query s sees positions <= L - s_q + s (none when that is negative). Sparse: indices
    [b, s_q, topk] are positions, valid iff 0 <= idx < L; invalid ones are skipped (never
    read), and no causal mask applies on top."""
    b, s_q, h, d = q.shape
    if d != D_QK:
        raise ValueError(f"q has {d} dims per head, not {D_QK}")
    token_bytes(kv_cache)
    ps = kv_cache.shape[1]
    qf = q.float()
    out = torch.zeros(b, s_q, h, D_V, dtype=torch.float32)
    lse = torch.full((b, h, s_q), math.inf, dtype=torch.float32)
    for i in range(b):
        L = int(cache_seqlens[i])
        if indices is None:
            if L <= 0:
                continue
            keys = token_values(gather_slots(
                kv_cache, slots_of_positions(block_table[i], torch.arange(L), ps)))
            visible = None
            if causal and s_q > 1:
                last = L - s_q + torch.arange(s_q)                   # last visible, per query
                vis = torch.arange(L)[None, :] <= last[:, None]      # [s_q, L]
                visible = vis.repeat_interleave(h, dim=0)            # rows ordered (s, h)
            o, l = attend(qf[i].reshape(s_q * h, D_QK), keys, softmax_scale, visible)
            out[i] = o.reshape(s_q, h, D_V)
            lse[i] = l.reshape(s_q, h).t()
        else:
            for s in range(s_q):
                row = indices[i, s].long()
                pos = row[(row >= 0) & (row < L)]
                keys = token_values(gather_slots(kv_cache, slots_of_positions(block_table[i], pos, ps)))
                o, l = attend(qf[i, s], keys, softmax_scale)
                out[i, s] = o
                lse[i, :, s] = l
    return out, lse


def decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call) -> None:
    """The mla_door decode: canonical conventions, writes every element of out and lse."""
    o, l = decode_rows(q, kv_cache, block_table, cache_seqlens, indices,
                       call.softmax_scale, bool(call.causal))
    out.copy_(o.to(out.dtype))
    lse.copy_(l)


def _kernel(out_dtype: str) -> mla_door.Kernel:
    return mla_door.Kernel(
        name=f"torch_mla_cpu_{out_dtype}",
        version="1",
        description=f"torch CPU MLA decode, fp32 math, {out_dtype} output, the suite's conventions",
        decode=decode,
        backend="cpu",
        out_dtype=out_dtype,
        caps=mla_door.Caps(cache_formats=("bf16", "fp8"), dense=True, sparse=True, varlen=True,
                           heads=(1, 128), s_q=(1, 64), page_sizes=()),
        conventions=mla_door.Conventions(),          # e, [b,h,s_q], +inf, positions
        precision=mla_door.Precision(operands="f32", accumulate="f32"),
    )


KERNEL = _kernel("f32")
KERNEL_BF16 = _kernel("bf16")
