"""DeepGEMM's indexer logits (`fp8_paged_mqa_logits`, `fp8_mqa_logits`) as V3.2's indexer logits
behind the Python door.

    mla certify --python mla_door.adapters.deepgemm:kernel

DeepGEMM computes the lightning indexer's scores for DeepSeek-V3.2 in vLLM and SGLang:

  - `fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
    max_context_len, clean_logits)` on a decode step: q float8_e4m3fn [b, next_n, heads, 128],
    kv_cache uint8 [num_blocks, block_size, 1, 132] (per block the tokens' 128 codes, then their
    float32 scales), weights float32 [b * next_n, heads], `schedule_meta` from
    `get_paged_mqa_logits_metadata(context_lens, block_size, num_sms)`;
  - `fp8_mqa_logits(q, (k_fp8, k_scales), weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits)` on a
    prefill: q [rows, heads, 128], keys [num_keys, 128] with float32 scales [num_keys].

Both return float32 logits. The adapter passes clean_logits=True, the call that writes -inf
outside each row's range as the certifier's contract demands (the paged call's default is
False: vLLM relies on its top-k to read only the range, and the positions past it hold whatever
the blocks computed). It claims what DeepGEMM's own tests run: 64 or 32 heads, blocks of 64
tokens, next_n 1 or 2.
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_library

MODULE = "deep_gemm"


def make(lib=None, name: Optional[str] = None, clean_logits: bool = True) -> mla_door.Kernel:
    """`lib` the deep_gemm module (None: import it) or a stand-in with its API. `clean_logits` False
    makes the call as vLLM's decode path does, for the red example: it must fail the -inf rule."""
    lib, why_not, backend, version = open_library(lib, MODULE)
    name = name or "deepgemm_mqa_logits"

    def paged(q, kv_cache, weights, context_lens, block_table, logits, call) -> None:
        cache = kv_cache.view(kv_cache.shape[0], call.block_size, 1, 132)
        meta = lib.get_paged_mqa_logits_metadata(context_lens, call.block_size, lib.get_num_sms())
        out = lib.fp8_paged_mqa_logits(mla_door.e4m3(q), cache, weights, context_lens, block_table, meta,
                                       call.max_context, clean_logits=clean_logits)
        # The library may round the width up to its split size; the certifier's row is max_context.
        logits.copy_(out[:, : call.max_context])

    def ragged(q, k_codes, k_scales, weights, ks, ke, logits, call) -> None:
        out = lib.fp8_mqa_logits(mla_door.e4m3(q), (mla_door.e4m3(k_codes), k_scales), weights, ks, ke,
                                 clean_logits=clean_logits)
        logits.copy_(out[:, : call.num_keys])

    return mla_door.Kernel(
        name=name, version=version, description=f"DeepGEMM fp8_paged_mqa_logits / fp8_mqa_logits ({MODULE} {version})",
        backend=backend,
        indexer_logits=mla_door.IndexerLogits(
            name=name, description="DeepGEMM indexer logits: paged (decode) and ragged (prefill) calls",
            paged=paged, ragged=ragged, next_ns=(1, 2), heads=(32, 64), block_sizes=(64,)),
        unavailable=availability(why_not, backend, MODULE))


def kernel() -> mla_door.Kernel:
    return make()
