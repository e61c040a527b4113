"""A CPU stand-in for FlashInfer's `top_k_ragged_transform`, for CI machines where flashinfer cannot
import.

It has the function's signature and the documented behaviour the adapter relies on
(mla_door/adapters/flashinfer_topk.py): per row i the k largest of input[i, row_starts[i] :
row_starts[i] + lengths[i]], written as local position + offsets[i], -1 past the row's length; a
row no longer than k returned whole, its positions in order, whatever their logits (-inf
included); no promised order otherwise (here: by descending logit, ties by position).

`library(bug)` returns the API with one deliberate bug (BUGS), for the red examples.
"""
from __future__ import annotations

import types
from typing import Optional

import torch

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "ignores_row_starts": "ranks from column 0 of each row whatever row_starts says (an older signature's behaviour)",
}


def library(bug: Optional[str] = None):
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    def top_k_ragged_transform(input, offsets, lengths, k, deterministic=False, tie_break=0, dsa_graph_safe=False,
                               row_starts=None):
        rows = input.shape[0]
        out = torch.full((rows, k), -1, dtype=torch.int32)
        for r in range(rows):
            s = 0 if row_starts is None or bug == "ignores_row_starts" else int(row_starts[r])
            n = int(lengths[r])
            if n <= 0:
                continue
            if n <= k:
                local = torch.arange(n)
            else:
                vals = input[r, s:s + n].float()
                local = torch.topk(vals, k, sorted=True).indices
            out[r, :local.numel()] = (local + int(offsets[r])).to(torch.int32)
        return out

    return types.SimpleNamespace(top_k_ragged_transform=top_k_ragged_transform, BACKEND=BACKEND,
                                 __version__=__version__ + (f"-{bug}" if bug else ""))
