"""A CPU stand-in for FlashInfer's `BatchPrefillWithRaggedKVCacheWrapper`, for CI machines where
flashinfer cannot import.

It has the wrapper's constructor, plan() and run() signatures (the arguments the adapter passes)
and the documented conventions the adapter declares (mla_door/adapters/flashinfer_prefill.py):
q [total_q, h, head_dim_qk], k [total_k, h_kv, head_dim_qk], v [total_k, h_kv, head_dim_vo] with
`qo_indptr` / `kv_indptr` fixed by plan(); causal aligned bottom-right; out [total_q, h,
head_dim_vo] in q's dtype and, with return_lse=True, a base-2 lse [total_q, h], -inf for a row
that attends nothing. The attention itself is FlashAttention's stand-in (standin_flash_attn:
float32 scores, P rounded to bf16 before P·V), so only the conventions differ.

`library(bug)` returns the API with one deliberate bug (BUGS), for the red examples.
"""
from __future__ import annotations

import math
import os
import sys
import types
from typing import Optional

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # loaded as a file (mla certify --python FILE.py:ATTR): find the siblings
    sys.path.insert(0, _HERE)
import standin_flash_attn  # noqa: E402  (the sibling module: the math)

__version__ = "cpu-standin-1"
BACKEND = "cpu"
LOG2E = 1.0 / math.log(2.0)

BUGS = {
    "natural_lse": "returns the natural-log lse while FlashInfer's convention is base 2 (the lse a "
                   "natural-log merge was once fed the other way round)",
}


def library(bug: Optional[str] = None):
    """A module-like namespace with the wrapper class."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    class BatchPrefillWithRaggedKVCacheWrapper:
        def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False):
            if kv_layout != "NHD":
                raise ValueError(f"the stand-in has the NHD layout only, not {kv_layout}")
            self._plan = None

        def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
                 causal=False, sm_scale=None, q_data_type="float16", kv_data_type=None, **unused):
            if unused:
                raise TypeError(f"the stand-in takes no {sorted(unused)}")
            if num_kv_heads != num_qo_heads:
                raise ValueError("the stand-in runs MHA only (as many kv heads as q heads)")
            self._plan = dict(qo_indptr=qo_indptr.to(torch.int32).cpu().clone(),
                              kv_indptr=kv_indptr.to(torch.int32).cpu().clone(),
                              d_qk=head_dim_qk, d_vo=head_dim_vo or head_dim_qk, causal=causal,
                              sm_scale=sm_scale if sm_scale is not None else head_dim_qk ** -0.5)

        def run(self, q, k, v, out=None, lse=None, return_lse=False):
            p = self._plan
            if p is None:
                raise RuntimeError("run() before plan()")
            if q.shape[0] != int(p["qo_indptr"][-1]):
                raise ValueError(f"q.shape[0] ({q.shape[0]}) does not match qo_indptr[-1] ({int(p['qo_indptr'][-1])})")
            if q.shape[-1] != p["d_qk"] or v.shape[-1] != p["d_vo"]:
                raise ValueError(f"head dims q {q.shape[-1]} / v {v.shape[-1]} are not the plan's "
                                 f"{p['d_qk']} / {p['d_vo']}")
            o, l = standin_flash_attn.varlen(q, k, v, p["qo_indptr"], p["kv_indptr"], 0, 0, p["sm_scale"],
                                             p["causal"], version=3, bug=None)
            s = l.t().contiguous()                           # [total_q, h], natural log, -inf empty
            if bug != "natural_lse":
                s = s * LOG2E
            if out is not None:
                out.copy_(o)
                o = out
            if lse is not None:
                lse.copy_(s)
                s = lse
            return (o, s) if return_lse else o

    return types.SimpleNamespace(BatchPrefillWithRaggedKVCacheWrapper=BatchPrefillWithRaggedKVCacheWrapper,
                                 BACKEND=BACKEND, __version__=__version__ + (f"-{bug}" if bug else ""))
