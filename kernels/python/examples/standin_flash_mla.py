"""A CPU stand-in for FlashMLA's Python API, for CI machines where flash_mla cannot import.

It has the signatures of `flash_mla.get_mla_metadata` and `flash_mla.flash_mla_with_kvcache`
and FlashMLA's documented conventions and limits (docs/field.md, "The peers' Python APIs as the
adapters call them", FlashMLA): dense decode over the bf16 cache [num_blocks, 64, 1, 576] with a
block table and 64-token pages; sparse decode over the FP8 cache [num_blocks, page, 1, 656]
(bytes, any page size) with indices that are global cache slots, -1 the only invalid value,
heads 64 or 128, topk a multiple of 64; out [b, s_q, h, 512] bf16, natural-log lse [b, h, s_q], +inf for an empty row.
The math is torch_mla's (fp32 on the CPU), so what a certification of it through
mla_door.adapters.flashmla measures is the adapter and the conventions, not a second kernel.

`library(bug)` returns the same API with one deliberate bug (BUGS), for the red examples; the
module's own functions are the correct library.
"""
from __future__ import annotations

import math
import os
import sys
import types
from dataclasses import dataclass
from typing import Optional

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)
import torch_mla  # noqa: E402  (the sibling module: the math)

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "dropped_last_token": "dense decode attends to L-1 tokens: the last token of every sequence is skipped",
    "slots_as_positions": "sparse indices read as positions in the sequence instead of global cache slots",
    "lse_base2": "returns the lse in base 2 while FlashMLA's convention is the natural log",
}


@dataclass
class SchedMeta:
    """What get_mla_metadata returns: the shape it was planned for (the real one holds the
    tile schedule, valid only for the same shapes and lengths)."""

    planned: Optional[tuple] = None


def library(bug: Optional[str] = None) -> types.SimpleNamespace:
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; known: {', '.join(sorted(BUGS))}")

    def get_mla_metadata(*args, **kwargs):
        return SchedMeta(), None

    def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                               tile_scheduler_metadata, num_splits=None, softmax_scale=None,
                               causal=False, is_fp8_kvcache=False, indices=None):
        if not isinstance(tile_scheduler_metadata, SchedMeta):
            raise TypeError("tile_scheduler_metadata must come from get_mla_metadata")
        if q.dtype != torch.bfloat16 or q.dim() != 4 or q.shape[-1] != 576:
            raise ValueError(f"q must be bf16 [b, s_q, h, 576], got {q.dtype} {list(q.shape)}")
        if head_dim_v != 512:
            raise ValueError("head_dim_v must be 512")
        b, s_q, h, _ = q.shape
        nb, ps, h_k, width = k_cache.shape
        if h_k != 1:
            raise ValueError("num_heads_k must be 1")
        if softmax_scale is None:
            softmax_scale = q.shape[-1] ** -0.5
        meta = (b, s_q, h, ps, bool(causal), bool(is_fp8_kvcache),
                None if indices is None else indices.shape[-1])
        if tile_scheduler_metadata.planned is None:
            tile_scheduler_metadata.planned = meta
        elif tile_scheduler_metadata.planned != meta:
            raise ValueError("tile_scheduler_metadata was planned for other arguments")
        if indices is None:
            if is_fp8_kvcache or k_cache.dtype != torch.bfloat16 or width != 576:
                raise ValueError("dense decode needs the bf16 cache [num_blocks, 64, 1, 576]")
            if ps != 64:
                raise ValueError(f"page_block_size must be 64 for dense decode, got {ps}")
            cache = k_cache.reshape(nb, ps, width).view(torch.uint8)          # the bf16 tokens' bytes
            lens = cache_seqlens
            if bug == "dropped_last_token":
                lens = (cache_seqlens - 1).clamp(min=0)
            out, lse = torch_mla.decode_rows(q, cache, block_table, lens, None, softmax_scale,
                                             bool(causal) and s_q > 1)
        else:
            if causal:
                raise ValueError("causal must be False when sparse attention is enabled")
            if not is_fp8_kvcache or k_cache.dtype not in (torch.uint8, torch.int8) or width != 656:
                raise ValueError("sparse decode needs the FP8 cache [num_blocks, page, 1, 656]")
            if h not in (64, 128):
                raise ValueError(f"sparse decode supports 64 or 128 heads, got {h}")
            topk = indices.shape[-1]
            if topk % 64:
                raise ValueError(f"topk must be a multiple of 64, got {topk}")
            cache = k_cache.reshape(nb, ps, width).view(torch.uint8)
            out, lse = _sparse(q, cache, block_table, cache_seqlens, indices, softmax_scale)
        if bug == "lse_base2":
            lse = lse * (1.0 / math.log(2.0))
        return out.to(torch.bfloat16), lse

    def _sparse(q, cache, block_table, cache_seqlens, indices, softmax_scale):
        b, s_q, h, _ = q.shape
        ps = cache.shape[1]
        out = torch.zeros(b, s_q, h, 512, dtype=torch.float32)
        lse = torch.full((b, h, s_q), math.inf, dtype=torch.float32)
        for i in range(b):
            for s in range(s_q):
                row = indices[i, s].long()
                if bug == "slots_as_positions":
                    L = int(cache_seqlens[i])
                    pos = row[(row >= 0) & (row < L)]
                    slots = torch_mla.slots_of_positions(block_table[i], pos, ps)
                else:
                    slots = row[row != -1]
                keys = torch_mla.token_values(torch_mla.gather_slots(cache, slots))
                o, l = torch_mla.attend(q[i, s].float(), keys, softmax_scale)
                out[i, s], lse[i, :, s] = o, l
        return out, lse

    return types.SimpleNamespace(
        __name__=__name__ + ("" if bug is None else "." + bug), __version__=__version__,
        BACKEND=BACKEND, BUG=bug, get_mla_metadata=get_mla_metadata,
        flash_mla_with_kvcache=flash_mla_with_kvcache)


_LIB = library()
get_mla_metadata = _LIB.get_mla_metadata
flash_mla_with_kvcache = _LIB.flash_mla_with_kvcache
