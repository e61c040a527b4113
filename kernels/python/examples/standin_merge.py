"""CPU stand-ins for vLLM's `merge_attn_states` and FlashInfer's `merge_state`, for CI machines
where neither imports.

Each has the function's signature and documented conventions (mla_door/adapters/merge_states.py):
vLLM writes the merged state into `output` / `output_lse` from natural-log lse [h, n]; FlashInfer
returns (v, s) from base-2 lse [n, h]. An infinite lse is an empty side (weight 0, its out never
read); both sides empty give out 0 and lse -inf. Math in float32, the out rounded once.

`vllm_library(bug)` / `flashinfer_library(bug)` return the API with one deliberate bug (BUGS).
"""
from __future__ import annotations

import math
import types
from typing import Optional

import torch

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "both_empty_nan": "vLLM: both sides empty give NaN (0/0), as its Triton fallback does",
    "pos_inf_as_number": "vLLM: a +inf lse (FlashAttention 2's empty row) weighed as a number",
    "natural_exp": "FlashInfer: base-2 lse weighed with e^x (base 2 treated as natural)",
}


def _merge(out_a, lse_a, out_b, lse_b, base2: bool, bug: Optional[str]):
    """out [n, h, d] float32 and lse [h, n] natural from states with lse [h, n] (already natural
    unless `base2`, then base 2 and converted here)."""
    to_e = math.log(2.0) if base2 and bug != "natural_exp" else 1.0
    la, lb = lse_a.double() * to_e, lse_b.double() * to_e
    ea = (la == -math.inf) if bug == "pos_inf_as_number" else torch.isinf(la)
    eb = (lb == -math.inf) if bug == "pos_inf_as_number" else torch.isinf(lb)
    m = torch.where(ea, lb, torch.where(eb, la, torch.maximum(la, lb)))
    both = ea & eb
    m0 = torch.where(both, torch.zeros_like(m), m)
    wa = torch.where(ea, torch.zeros_like(la), torch.exp(la - m0))
    wb = torch.where(eb, torch.zeros_like(lb), torch.exp(lb - m0))
    total = wa + wb
    a = torch.where(ea.t()[..., None], torch.zeros_like(out_a, dtype=torch.float64), out_a.double())
    b = torch.where(eb.t()[..., None], torch.zeros_like(out_b, dtype=torch.float64), out_b.double())
    denom = total if bug == "both_empty_nan" else torch.where(both, torch.ones_like(total), total)
    out = (wa.t()[..., None] * a + wb.t()[..., None] * b) / denom.t()[..., None]
    lse = torch.where(both, torch.full_like(m, -math.inf), m0 + torch.log(total))
    if bug == "both_empty_nan":
        lse = torch.where(both, torch.full_like(m, math.nan), lse)
    if base2 and bug != "natural_exp":
        lse = lse / math.log(2.0)
    return out.float(), lse.float()


def vllm_library(bug: Optional[str] = None):
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
        out, lse = _merge(prefix_output, prefix_lse, suffix_output, suffix_lse, False, bug)
        output.copy_(out.to(output.dtype))
        if output_lse is not None:
            output_lse.copy_(lse)

    return types.SimpleNamespace(merge_attn_states=merge_attn_states, BACKEND=BACKEND,
                                 __version__=f"{__version__}-vllm" + (f"-{bug}" if bug else ""))


def flashinfer_library(bug: Optional[str] = None):
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    def merge_state(v_a, s_a, v_b, s_b):
        out, lse = _merge(v_a, s_a.t(), v_b, s_b.t(), True, bug)
        return out.to(v_a.dtype), lse.t().contiguous()

    return types.SimpleNamespace(merge_state=merge_state, BACKEND=BACKEND,
                                 __version__=f"{__version__}-flashinfer" + (f"-{bug}" if bug else ""))
