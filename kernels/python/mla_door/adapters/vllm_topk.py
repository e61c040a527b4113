"""vLLM's per-row top-k (`torch.ops._C.top_k_per_row_prefill`) as V3.2's top-k behind the Python door.

    mla certify --python mla_door.adapters.vllm_topk:kernel

vLLM's sparse-attention indexer selects each query row's index_topk (2048) key positions with
`top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k)`
(registered by importing `vllm._C`): float32 logits [rows, n] with each row's valid range
[row_starts, row_ends), int32 indices [rows, top_k] written in place, relative to the row's start,
in no promised order, -1 padded. The adapter declares that (relative, unsorted, float32
comparisons) and claims k = 2048 only, the size the kernel was written for; the certifier makes
the indices absolute itself.
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_vllm_ops

MODULE = "vllm._C"


def make(ops=None, name: Optional[str] = None) -> mla_door.Kernel:
    """`ops` anything with top_k_per_row_prefill (None: torch.ops._C after importing vllm._C) or
    a stand-in with its API (a `BACKEND` attribute says where it runs, "cpu")."""
    ops, why_not, backend, version = open_vllm_ops(ops, "_C")
    name = name or "vllm_top_k_per_row"

    def topk(logits, starts, ends, indices, call) -> None:
        ops.top_k_per_row_prefill(logits, starts, ends, indices, call.rows, logits.stride(0), logits.stride(1), call.k)

    return mla_door.Kernel(
        name=name, version=version, description=f"vLLM top_k_per_row_prefill ({MODULE} {version})", backend=backend,
        topk=mla_door.Topk(name=name, description="vLLM top_k_per_row_prefill: relative indices, unsorted",
                           topk=topk, ks=(2048,), index_base="relative", sorted=False, precision="f32"),
        unavailable=availability(why_not, backend, MODULE))


def kernel() -> mla_door.Kernel:
    return make()
