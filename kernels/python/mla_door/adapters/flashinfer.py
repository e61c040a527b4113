"""FlashInfer (`flashinfer.mla.BatchMLAPagedAttentionWrapper`) behind the Python door.

What it relies on is in docs/field.md, "The peers' Python APIs as the adapters call them",
FlashInfer: q split into q_nope [n, h, 512] and q_pe [n, h, 64] over the n = b·s_q query rows;
the bf16 cache split into ckv [pages, page, 512] and kpe [pages, page, 64]; no block table but
CSR page lists (qo_indptr, kv_indptr, kv_indices) and kv_len_arr, planned per call; out
[n, h, 512] in q's dtype and, with return_lse=True, a base-2 lse [n, h] (= [b, s_q, h]) with
-inf for a row that sees nothing. Causal rows are aligned to the end of the sequence.
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, import_library
from mla_door import D_V, D_ROPE

NAME = "flashinfer"
# The workspace FlashInfer's documentation recommends for its split-KV partial results.
WORKSPACE_BYTES = 128 * 1024 * 1024


def can_implement(shape: mla_door.Shape) -> Optional[str]:
    if shape.topk:
        return "BatchMLAPagedAttentionWrapper is a dense decode (no sparse indices)"
    if shape.cache_format != "bf16":
        return ("BatchMLAPagedAttentionWrapper reads a bf16/fp16 cache (its FP8 path takes one "
                "per-tensor scale, not the 656-byte token's per-128 scales)")
    # A causal multi-token row that sees no key (a sequence shorter than s_q): FlashInfer's own
    # reference gives NaN there and its tests leave that domain out, so it is not claimed.
    short = [L for L in shape.cache_seqlens if L < shape.s_q]
    if shape.causal and shape.s_q > 1 and short:
        return (f"a causal row that attends nothing (length {short[0]} < s_q {shape.s_q}) is outside "
                "FlashInfer's tested domain (its reference gives NaN there)")
    return None



def csr_pages(block_table, cache_seqlens, page_size: int):
    """FlashInfer's page lists from a block table: sequence i's pages are its first
    ceil(L_i / page_size) block-table entries, concatenated in order. Returns (kv_indptr
    [b + 1], kv_indices) int32 on the block table's device; nothing past a sequence's pages
    (sentinel entries) is ever passed on."""
    import torch

    n = (cache_seqlens.long() + page_size - 1) // page_size                  # pages per sequence
    cols = torch.arange(block_table.shape[1], device=block_table.device)
    kv_indices = block_table[cols[None, :] < n[:, None]].to(torch.int32)      # row-major: in order
    kv_indptr = torch.zeros(n.numel() + 1, dtype=torch.int32, device=block_table.device)
    kv_indptr[1:] = torch.cumsum(n, 0).to(torch.int32)
    return kv_indptr, kv_indices


def make(lib=None, name: Optional[str] = None) -> mla_door.Kernel:
    """The FlashInfer kernel: `lib` the flashinfer.mla module (None: import it) or a stand-in
    with its API. A stand-in says where it runs with a `BACKEND` attribute ("cpu")."""
    why_not = None
    if lib is None:
        lib, why_not = import_library("flashinfer.mla")
    backend = getattr(lib, "BACKEND", "cuda") if lib is not None else "cuda"
    version = "absent"
    if lib is not None:
        version = str(getattr(lib, "__version__", None) or _package_version() or "unknown")
    state = {}

    def wrapper_for(device):
        # One wrapper (and its workspace) per device; plan() is called afresh for every call.
        if state.get("device") != device:
            import torch
            ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
            state["wrapper"] = lib.BatchMLAPagedAttentionWrapper(ws, backend="auto")
            state["device"] = device
        return state["wrapper"]

    def decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call) -> None:
        import torch

        b, s_q, h, d = q.shape
        ps = kv_cache.shape[1]
        cache = mla_door.bf16_cache(kv_cache)                  # [pages, ps, 576]
        ckv, kpe = cache[..., :D_V], cache[..., D_V:]          # strided views, no copy
        rows = q.reshape(b * s_q, h, d)
        q_nope, q_pe = rows[..., :D_V], rows[..., D_V:]
        qo_indptr = torch.arange(b + 1, dtype=torch.int32, device=q.device) * s_q
        kv_indptr, kv_indices = csr_pages(block_table, cache_seqlens, ps)
        w = wrapper_for(q.device)
        w.plan(qo_indptr, kv_indptr, kv_indices, cache_seqlens, h, D_V, D_ROPE, ps,
               bool(call.causal), call.softmax_scale, q.dtype, cache.dtype)
        o, l = w.run(q_nope, q_pe, ckv, kpe, return_lse=True)
        out.copy_(o.reshape(b, s_q, h, D_V))
        lse.copy_(l.reshape(b, s_q, h))

    return mla_door.Kernel(
        name=name or NAME,
        version=version,
        description="FlashInfer BatchMLAPagedAttentionWrapper: dense decode on the bf16 cache, "
                    "CSR page lists, base-2 lse [b,s_q,h]",
        decode=decode,
        backend=backend,
        out_dtype="bf16",
        caps=mla_door.Caps(cache_formats=("bf16",), dense=True, sparse=False, varlen=True,
                           heads=(1, 128), s_q=(1, 64), page_sizes=()),
        conventions=mla_door.Conventions(lse_base="2", lse_layout="[b,s_q,h]", empty_row_lse="-inf",
                                         indices="positions"),
        # P is rounded to the cache dtype (bf16) for P·V; sums in fp32.
        precision=mla_door.Precision(operands="bf16", accumulate="f32"),
        can_implement=can_implement,
        unavailable=availability(why_not, backend, "flashinfer.mla"),
    )


def _package_version() -> Optional[str]:
    try:
        import flashinfer
        return getattr(flashinfer, "__version__", None)
    except Exception:
        return None


def kernel() -> mla_door.Kernel:
    """`mla certify --python mla_door.adapters.flashinfer:kernel`: the installed flashinfer."""
    return make()
