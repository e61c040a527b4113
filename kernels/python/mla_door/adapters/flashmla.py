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
from mla_door.adapters import availability, open_library, takes_argument
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



def make_sparse_prefill(lib=None, name: Optional[str] = None) -> mla_door.Kernel:
    """FlashMLA's sparse prefill, `flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v, attn_sink,
    topk_length)`, as a kernel of that entry alone: kv handed over as FlashMLA's [s_kv, 1, d_qk] and
    indices as [s_q, 1, topk]; out bf16, max_logits and a natural-log lse [s_q, h] as it returns
    them. It claims what FlashMLA states: 64 or 128 heads, topk a multiple of 64; the sink and
    topk_length where this version of the function takes them (older ones had neither)."""
    lib, why_not, backend, version = open_library(lib, "flash_mla")
    name = name or "flashmla_sparse_prefill"
    fwd = getattr(lib, "flash_mla_sparse_fwd", None) if lib is not None else None
    if lib is not None and fwd is None and why_not is None:
        why_not = f"flash_mla {version} has no flash_mla_sparse_fwd"
    sink = fwd is not None and takes_argument(fwd, "attn_sink")
    length = fwd is not None and takes_argument(fwd, "topk_length")

    def sparse_prefill(q, kv, indices, attn_sink, topk_length, out, max_logits, lse, call) -> None:
        extra = {}
        if attn_sink is not None:
            extra["attn_sink"] = attn_sink
        if topk_length is not None:
            extra["topk_length"] = topk_length
        o, m, l = fwd(q, kv.unsqueeze(1), indices.unsqueeze(1), call.sm_scale, call.d_v, **extra)
        out.copy_(o)
        max_logits.copy_(m)
        lse.copy_(l)

    return mla_door.Kernel(
        name=name, version=version, description=f"FlashMLA flash_mla_sparse_fwd (flash_mla {version})", backend=backend,
        sparse_prefill=mla_door.SparsePrefill(
            name=name, description="FlashMLA sparse prefill: natural-log lse [s_q, h], bf16 out",
            sparse_prefill=sparse_prefill, out_dtype="bf16", precision=mla_door.Precision(operands="bf16", accumulate="f32"),
            heads=SPARSE_HEADS, topk_multiple=SPARSE_TOPK_MULTIPLE, sink=sink, topk_length=length),
        unavailable=availability(why_not, backend, "flash_mla"))


def sparse_prefill() -> mla_door.Kernel:
    """`mla certify --python mla_door.adapters.flashmla:sparse_prefill`: the installed flash_mla's."""
    return make_sparse_prefill()
