"""A CPU stand-in for FlashMLA's sparse prefill, `flash_mla.flash_mla_sparse_fwd`, for CI machines
where flash_mla cannot import.

It has the function's signature (mla_door/adapters/flashmla.py, sparse_prefill):

    flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None)
        -> (out [s_q, h, d_v] bf16, max_logits [s_q, h] float32, lse [s_q, h] float32)

q bf16 [s_q, h, d_qk], kv bf16 [s_kv, 1, d_qk], indices int32 [s_q, 1, topk]; an entry is a key
when 0 <= idx < s_kv and, with topk_length, j < topk_length[i]. Its arithmetic is FlashMLA's
reference's: gathered keys, float32 scores, a float32 softmax whose denominator takes the sink,
P rounded to bf16, float32 P·V, out rounded to bf16; lse natural, of the keys alone. A row without
keys: out 0, max_logits -inf, lse +inf.

`library(bug)` returns the API with one deliberate bug (BUGS), for the red examples.
"""
from __future__ import annotations

import math
import types
from typing import Optional

import torch

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "minus_one_as_zero": "gathers every entry, -1 included (as position 0), masking only those >= s_kv",
    "lse_base2": "returns lse in base 2, as an early FlashMLA documented its sparse prefill's",
}


def library(bug: Optional[str] = None) -> types.SimpleNamespace:
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; known: {', '.join(sorted(BUGS))}")

    def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None):
        s_q, h, d_qk = q.shape
        kv2 = kv.reshape(kv.shape[0], d_qk).float()
        idx = indices.reshape(s_q, -1).long()
        s_kv, topk = kv2.shape[0], idx.shape[1]
        out = torch.zeros((s_q, h, d_v), dtype=torch.bfloat16)
        max_logits = torch.full((s_q, h), -math.inf, dtype=torch.float32)
        lse = torch.full((s_q, h), math.inf, dtype=torch.float32)
        scale = torch.tensor(sm_scale, dtype=torch.float32)
        for i in range(s_q):
            row = idx[i]
            if bug == "minus_one_as_zero":
                row = torch.where(row == -1, torch.zeros_like(row), row)
            ok = (row >= 0) & (row < s_kv)
            if topk_length is not None:
                ok &= torch.arange(topk) < int(topk_length[i])
            keys = row[ok]
            if bug == "minus_one_as_zero":
                keys = torch.unique(keys)  # one gather slot per position, as the bug's writes land
            if keys.numel() == 0:
                continue
            K = kv2[keys]                                   # [n, d_qk]
            s = (q[i].float() @ K.t()) * scale              # [h, n]
            m = s.max(dim=-1, keepdim=True).values
            e = torch.exp(s - m)
            ssum = e.sum(dim=-1, keepdim=True)
            denom = ssum if attn_sink is None else ssum + torch.exp(attn_sink.float()[:, None] - m)
            p = (e / denom).to(torch.bfloat16).float()
            out[i] = (p @ K[:, :d_v]).to(torch.bfloat16)
            max_logits[i] = m[:, 0]
            l = (m + torch.log(ssum))[:, 0]
            lse[i] = l / math.log(2.0) if bug == "lse_base2" else l
        return out, max_logits, lse

    return types.SimpleNamespace(__version__=__version__, BACKEND=BACKEND, flash_mla_sparse_fwd=flash_mla_sparse_fwd)
