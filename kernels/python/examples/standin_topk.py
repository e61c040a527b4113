"""A CPU stand-in for vLLM's `top_k_per_row_prefill`, for CI machines where vllm cannot import.

It has the op's signature (mla_door/adapters/vllm_topk.py): float32 logits [rows, n] read through
(stride0, stride1), each row's valid range [row_starts, row_ends), int32 indices [rows, top_k]
written in place, relative to the row's start, -1 padded; a masked position (-inf) is never
selected. Its order within a row: none promised, as the real op's (whose order may change from call
to call): by position, descending, rotated by one more place on every call, so that the certifier's
repeated calls see the same set in another order.

`ops(bug)` returns the API with one deliberate bug (BUGS), for the red examples.
"""
from __future__ import annotations

import types
from typing import Optional

import torch

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "absolute_indices": "writes absolute columns while the convention is relative to the row's start",
    "keeps_masked": "treats -inf as a value: a row with fewer valid positions than k is padded with masked ones",
    "second_call_differs": "from its second call on, leaves out each row's last selected position (-1 instead)",
}


def ops(bug: Optional[str] = None):
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    calls = [0]

    def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
        call = calls[0]
        calls[0] += 1
        flat = logits.reshape(-1)
        indices.fill_(-1)
        for r in range(num_rows):
            s, e = int(row_starts[r]), int(row_ends[r])
            if e <= s:
                continue
            row = flat[r * stride0 + torch.arange(s, e) * stride1]
            ok = torch.ones_like(row, dtype=torch.bool) if bug == "keeps_masked" else torch.isfinite(row)
            cand = torch.nonzero(ok).flatten()
            take = min(top_k, cand.numel())
            if take == 0:
                continue
            vals = row[cand].clone()
            vals[torch.isinf(vals)] = -3.0e38  # a masked one only ever fills what nothing else can
            best = cand[torch.topk(vals, take, sorted=False).indices]
            best = torch.roll(torch.sort(best, descending=True).values, call)
            if bug == "second_call_differs" and call > 0:
                best = best[:-1]
            indices[r, :best.numel()] = (best + (s if bug == "absolute_indices" else 0)).to(torch.int32)

    return types.SimpleNamespace(top_k_per_row_prefill=top_k_per_row_prefill, BACKEND=BACKEND,
                                 __version__=f"{__version__}" + (f"-{bug}" if bug else ""))
