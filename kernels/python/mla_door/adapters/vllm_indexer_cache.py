"""vLLM's `indexer_k_quant_and_cache` as V3.2's indexer key cache append behind the Python door.

    mla certify --python mla_door.adapters.vllm_indexer_cache:kernel

vLLM's sparse-attention indexer writes each step's keys into the paged 132-byte cache DeepGEMM's
logits read with `torch.ops._C_cache_ops.indexer_k_quant_and_cache(k, kv_cache, slot_mapping,
quant_block_size, scale_fmt)` (registered by importing `vllm._C`): bf16 k [num_tokens, 128],
kv_cache uint8 [num_blocks, block_size, 132] written in place, int64 slots (< 0 skipped),
quant_block_size 128 and scale_fmt "ue8m0", the format of V3.2's checkpoints and the only one the
adapter claims. Its float32 scale is max(amax, 1e-4) / 448 (declared "divide").
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_vllm_ops

MODULE = "vllm._C"


def make(ops=None, name: Optional[str] = None) -> mla_door.Kernel:
    """`ops` anything with indexer_k_quant_and_cache (None: torch.ops._C_cache_ops after importing
    vllm._C) or a stand-in with its API (a `BACKEND` attribute says where it runs, "cpu")."""
    ops, why_not, backend, version = open_vllm_ops(ops, "_C_cache_ops")
    name = name or "vllm_indexer_k_quant_and_cache"

    def append(keys, slot_mapping, kv_cache, call) -> None:
        cache = kv_cache.view(call.num_blocks, call.block_size, 132)
        ops.indexer_k_quant_and_cache(keys, cache, slot_mapping, 128, call.scale_fmt)

    return mla_door.Kernel(
        name=name, version=version, description=f"vLLM indexer_k_quant_and_cache ({MODULE} {version})",
        backend=backend,
        indexer_append=mla_door.IndexerAppend(
            name=name, description="vLLM indexer_k_quant_and_cache: ue8m0 scales, max(amax, 1e-4) / 448",
            append=append, scale_fmts=("ue8m0",), fp32_scale_op="divide"),
        unavailable=availability(why_not, backend, MODULE))


def kernel() -> mla_door.Kernel:
    return make()
