"""FlashMLA (`flash_mla.flash_mla_with_kvcache` with `get_mla_metadata`) behind the Python door.

What it relies on is in docs/field.md, "The peers' Python APIs as the adapters call them",
FlashMLA: the absorbed q [b, s_q, h, 576] bf16 as is; the cache as [num_blocks, 64, 1, 576]
bf16 for dense decode and [num_blocks, page, 1, 656] bytes for sparse decode on the FP8 cache;
sparse indices are global cache slots (block · page_size + offset) with -1 the only invalid
value; out [b, s_q, h, 512] bf16 and a natural-log lse [b, h, s_q] with +inf for an empty row.
The scheduler metadata is computed afresh for every call (it is only valid for the lengths it
was planned with).
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_library
from mla_door import D_V

NAME = "flashmla"

# The library's own limits (docs/field.md, "The peers' Python APIs as the adapters call them");
# the sparse decode takes any page size (its indices are global slots).
PAGE_SIZE = 64
SPARSE_HEADS = (64, 128)
SPARSE_TOPK_MULTIPLE = 64


def can_implement(shape: mla_door.Shape) -> Optional[str]:
    if shape.topk == 0:
        if shape.cache_format != "bf16":
            return "FlashMLA's dense decode reads the bf16 cache only (the FP8 cache is sparse-only)"
        if shape.page_size != PAGE_SIZE:
            return f"FlashMLA's dense decode reads pages of {PAGE_SIZE} tokens only (page size {shape.page_size})"
        return None
    if shape.cache_format != "fp8":
        return "FlashMLA's sparse decode reads the FP8 656-byte cache only"
    if shape.heads not in SPARSE_HEADS:
        return f"FlashMLA's sparse decode runs 64 or 128 heads only ({shape.heads})"
    if shape.topk % SPARSE_TOPK_MULTIPLE:
        return f"FlashMLA's sparse decode needs topk % {SPARSE_TOPK_MULTIPLE} == 0 (topk {shape.topk})"
    if shape.causal:
        return "FlashMLA's sparse decode has no causal mask"
    return None


def make(lib=None, name: Optional[str] = None) -> mla_door.Kernel:
    """The FlashMLA kernel: `lib` the flash_mla module (None: import it) or a stand-in with its API.

    A stand-in says where it runs with a `BACKEND` attribute ("cpu"); the real library is "cuda"."""
    lib, why_not, backend, version = open_library(lib, "flash_mla")

    def decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call) -> None:
        nb, ps, width = kv_cache.shape
        sparse = indices is not None
        if sparse:
            k_cache = kv_cache.view(nb, ps, 1, width)            # the 656-byte tokens, as bytes
        else:
            k_cache = mla_door.bf16_cache(kv_cache).unsqueeze(2)  # [nb, ps, 1, 576] bf16
        # Both the older API (which computed the tile schedule here from these arguments) and
        # the newer one (which takes *args and plans on the first call) accept this call.
        meta, splits = lib.get_mla_metadata(cache_seqlens, call.s_q * call.heads, 1, call.heads,
                                            sparse, indices.shape[-1] if sparse else None)
        o, l = lib.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, D_V, meta, splits,
                                          softmax_scale=call.softmax_scale,
                                          causal=bool(call.causal) and not sparse,
                                          is_fp8_kvcache=sparse, indices=indices)
        out.copy_(o)
        lse.copy_(l)

    return mla_door.Kernel(
        name=name or NAME,
        version=version,
        description="FlashMLA flash_mla_with_kvcache: dense decode on the bf16 cache with 64-token "
                    "pages, sparse decode on the FP8 cache (global slots)",
        decode=decode,
        backend=backend,
        out_dtype="bf16",
        caps=mla_door.Caps(cache_formats=("bf16", "fp8"), dense=True, sparse=True, varlen=True,
                           heads=(1, 128), s_q=(1, 64), page_sizes=()),
        conventions=mla_door.Conventions(lse_base="e", lse_layout="[b,h,s_q]", empty_row_lse="+inf",
                                         indices="global_slots"),
        # FlashMLA dequantizes the FP8 cache into bf16 and rounds P to bf16 for P·V, fp32 sums.
        precision=mla_door.Precision(operands="bf16", accumulate="f32"),
        can_implement=can_implement,
        unavailable=availability(why_not, backend, "flash_mla"),
    )


def kernel() -> mla_door.Kernel:
    """`mla certify --python mla_door.adapters.flashmla:kernel`: the installed flash_mla."""
    return make()

