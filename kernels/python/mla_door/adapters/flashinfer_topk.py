"""FlashInfer's fused top-k for sparse attention (`flashinfer.top_k_ragged_transform`) as V3.2's
top-k behind the Python door.

    mla certify --python mla_door.adapters.flashinfer_topk:kernel

What it computes, as the adapter calls it (docs/field.md, "FlashInfer's top-k"):
`top_k_ragged_transform(input, offsets, lengths, k, deterministic, tie_break, dsa_graph_safe,
row_starts)` selects, per row i, the k largest of `input[i, row_starts[i] : row_starts[i] +
lengths[i]]` and writes `local + offsets[i]` (int32 [rows, k]), -1 past the row's length. With
`offsets = row_starts = starts` the indices are columns of the logits row: absolute. It promises
no order, and repeatable output only with `deterministic=True`, which the adapter passes (the
certifier calls twice and compares each row's set). A row no longer than k is returned whole, in
range positions in order, -inf ones included: the kernel is written for ranges that are the causal
horizon, where every position is valid. The adapter declares that (`range_all_valid`), so the
certifier gives it no masked position inside a range; float32 logits compared as given.

Versions without `row_starts` rank from column 0 of each row: the adapter then refuses a row that
starts past 0 (Unsupported, naming it), never shifting the logits itself.
"""
from __future__ import annotations

from typing import Optional

import mla_door
from mla_door.adapters import availability, open_library, takes_argument

MODULE = "flashinfer"


def make(lib=None, name: Optional[str] = None) -> mla_door.Kernel:
    """`lib` the flashinfer module (None: import it) or a stand-in with its top_k_ragged_transform
    (a `BACKEND` attribute says where it runs, "cpu")."""
    lib, why_not, backend, version = open_library(lib, MODULE)
    name = name or "flashinfer_top_k_ragged"
    takes_starts = lib is not None and takes_argument(lib.top_k_ragged_transform, "row_starts")

    def topk(logits, starts, ends, indices, call) -> None:
        import torch

        lengths = torch.clamp(ends - starts, min=0).to(torch.int32)  # end < start: an empty row
        extra = {}
        if takes_starts:
            extra["row_starts"] = starts
        elif bool((starts != 0).any()):
            first = int(torch.nonzero(starts != 0)[0, 0])
            raise mla_door.Unsupported(f"row {first} starts at {int(starts[first])}: this flashinfer has no row_starts "
                                       "(its top-k ranks from column 0)")
        out = lib.top_k_ragged_transform(logits, starts, lengths, call.k, deterministic=True, **extra)
        indices.copy_(out.to(torch.int32))

    return mla_door.Kernel(
        name=name, version=version, description=f"FlashInfer top_k_ragged_transform ({MODULE} {version})",
        backend=backend,
        topk=mla_door.Topk(name=name, description="FlashInfer top_k_ragged_transform: absolute, unsorted, "
                                                  "deterministic mode, ranges of valid positions",
                           topk=topk, index_base="absolute", sorted=False, precision="f32", range_all_valid=True),
        unavailable=availability(why_not, backend, MODULE))


def kernel() -> mla_door.Kernel:
    return make()
