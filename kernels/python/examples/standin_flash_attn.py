"""A CPU stand-in for FlashAttention's `flash_attn_varlen_func`, versions 2 and 3, for CI machines
where flash_attn cannot import.

It has the function's signature and the documented conventions the adapter relies on
(mla_door/adapters/flash_attn.py): q [total_q, h, d], k [total_k, h, d], v [total_k, h, d_v];
int32 cu_seqlens_q / cu_seqlens_k and their maxima; `softmax_scale`; `causal` aligned
bottom-right (query i of a sequence with s_q queries and s_k keys sees keys j <= s_k - s_q + i);
out [total_q, h, d_v] in q's dtype and a natural-log lse [h, total_q]. Version 2 refuses a V
narrower than q (as FlashAttention 2 does: d_v must equal d), writes +inf for a row that attends
nothing and returns (out, lse, None); version 3 takes d_v != d, writes -inf and returns (out, lse).
Math: float32 scores and softmax, P rounded to bf16 before P·V as the kernels do, float32 sums.

`library(version, bug)` returns the API with one deliberate bug (BUGS), for the red examples.
"""
from __future__ import annotations

import types
from typing import Optional

import torch

__version__ = "cpu-standin-1"
BACKEND = "cpu"

BUGS = {
    "top_left": "aligns the causal mask top-left (query i sees keys j <= i), as FlashAttention before 2.1",
    "cu_seqlens_off_by_one": "reads sequence i's keys from cu_seqlens_k[i + 1] on (one sequence off), clipped",
}


def varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
           version: int, bug: Optional[str]):
    """The varlen attention both versions compute (and FlashInfer's ragged stand-in reuses, with
    version 3's V width and -inf): out [total_q, h, d_v] in q's dtype, natural-log lse [h, total_q]."""
    if version == 2 and v.shape[-1] != q.shape[-1]:
        raise RuntimeError(f"FlashAttention 2 needs v's head dim ({v.shape[-1]}) to equal q's ({q.shape[-1]})")
    total_q, h, _ = q.shape
    d_v = v.shape[-1]
    out = torch.zeros(total_q, h, d_v, dtype=q.dtype)
    lse = torch.full((h, total_q), float("inf") if version == 2 else float("-inf"), dtype=torch.float32)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    total_k = k.shape[0]
    for b in range(len(cq) - 1):
        q0, s_q = cq[b], cq[b + 1] - cq[b]
        k0, s_k = ck[b], ck[b + 1] - ck[b]
        if bug == "cu_seqlens_off_by_one":
            k0 = ck[min(b + 1, len(ck) - 1)]
            s_k = max(0, min(s_k, total_k - k0))
        if s_q == 0 or s_k == 0:
            continue
        qs = q[q0:q0 + s_q].float().transpose(0, 1)            # [h, s_q, d]
        ks = k[k0:k0 + s_k].float().transpose(0, 1)            # [h, s_k, d]
        vs = v[k0:k0 + s_k].float().transpose(0, 1)            # [h, s_k, d_v]
        scores = torch.matmul(qs, ks.transpose(1, 2)) * softmax_scale   # [h, s_q, s_k]
        if causal:
            i = torch.arange(s_q)[:, None]
            j = torch.arange(s_k)[None, :]
            last = i if bug == "top_left" else s_k - s_q + i
            scores = scores.masked_fill(j > last, float("-inf"))
        m = scores.max(dim=-1, keepdim=True).values             # [h, s_q, 1]
        seen = torch.isfinite(m)                                 # rows that attend a key
        m0 = torch.where(seen, m, torch.zeros_like(m))
        p = torch.exp(scores - m0)
        total = p.sum(dim=-1, keepdim=True)
        o = torch.matmul(p.to(torch.bfloat16).float(), vs) / torch.where(seen, total, torch.ones_like(total))
        o = torch.where(seen, o, torch.zeros_like(o))
        out[q0:q0 + s_q] = o.transpose(0, 1).to(q.dtype)
        row_lse = (m0 + torch.log(total)).squeeze(-1)            # [h, s_q]
        lse[:, q0:q0 + s_q] = torch.where(seen.squeeze(-1), row_lse, lse[:, q0:q0 + s_q])
    return out, lse


def library(version: int = 2, bug: Optional[str] = None):
    """A module-like namespace with FlashAttention `version`'s flash_attn_varlen_func."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}: one of {sorted(BUGS)}")

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, return_attn_probs=False):
        if dropout_p:
            raise RuntimeError("the stand-in has no dropout")
        scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
        out, lse = varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, version, bug)
        if version == 2:
            return (out, lse, None) if return_attn_probs else out
        return out, lse

    return types.SimpleNamespace(flash_attn_varlen_func=flash_attn_varlen_func, BACKEND=BACKEND,
                                 __version__=f"{__version__}-fa{version}" + (f"-{bug}" if bug else ""))
