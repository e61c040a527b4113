"""A CPU stand-in for FlashInfer's BatchMLAPagedAttentionWrapper, for CI machines where
flashinfer cannot import.

It has the wrapper's constructor, plan() and run() signatures and FlashInfer's documented
conventions (docs/field.md, "The peers' Python APIs as the adapters call them", FlashInfer):
q split into q_nope [n, h, 512] and q_pe [n, h, 64]; the cache split into ckv [pages, page, 512]
and kpe [pages, page, 64]; CSR page lists (token t of request i lives in page
kv_indices[kv_indptr[i] + t // page] at offset t % page, read as one flat list the way the
kernel does) and kv_len_arr; causal rows aligned to the end of the sequence; out [n, h, 512] in
q's dtype; with return_lse=True a base-2 lse [n, h], -inf for a row that sees nothing. The math
is torch_mla's (fp32 on the CPU).

`library(bug)` returns the same API with one deliberate bug (BUGS), for the red examples; the
module's own wrapper class is the correct library.
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
import torch_mla  # noqa: E402  (the sibling module: the math)

__version__ = "cpu-standin-1"
BACKEND = "cpu"
LOG2E = 1.0 / math.log(2.0)

BUGS = {
    "natural_lse": "returns the natural-log lse while FlashInfer's convention is base 2",
    "short_csr": "plans one page too few for every sequence (its last page is never read)",
    "causal_top_left": "aligns the causal mask to the start of the sequence (query s sees positions <= s)",
}


def library(bug: Optional[str] = None) -> types.SimpleNamespace:
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; known: {', '.join(sorted(BUGS))}")

    class BatchMLAPagedAttentionWrapper:
        def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None,
                     kv_indptr=None, kv_indices=None, kv_len_arr=None, backend="auto"):
            self.device = float_workspace_buffer.device
            self._plan = None

        def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv,
                 head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type,
                 use_profiler=False):
            if head_dim_ckv != 512 or head_dim_kpe != 64:
                raise ValueError(f"head dims {head_dim_ckv}/{head_dim_kpe}: this build has 512/64")
            qo_indptr, kv_indptr = qo_indptr.long().clone(), kv_indptr.long().clone()
            kv_indices = kv_indices.long().clone()
            if bug == "short_csr":
                keep = torch.ones(kv_indices.numel(), dtype=torch.bool)
                for i in range(kv_indptr.numel() - 1):
                    if kv_indptr[i + 1] > kv_indptr[i]:
                        keep[kv_indptr[i + 1] - 1] = False
                counts = (kv_indptr[1:] - kv_indptr[:-1] - 1).clamp(min=0)
                kv_indices = kv_indices[keep]
                kv_indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
            self._plan = dict(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices,
                              kv_len=kv_len_arr.long().clone(), num_heads=int(num_heads),
                              page_size=int(page_size), causal=bool(causal),
                              sm_scale=float(sm_scale), q_dtype=q_data_type, kv_dtype=kv_data_type)

        def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False,
                profiler_buffer=None, kv_len=None, page_table=None, return_lse_base_on_e=False):
            p = self._plan
            if p is None:
                raise RuntimeError("run() before plan()")
            if q_nope.dtype != p["q_dtype"] or ckv_cache.dtype != p["kv_dtype"]:
                raise ValueError("q or kv dtype differs from the planned one")
            n, h, _ = q_nope.shape
            if h != p["num_heads"]:
                raise ValueError(f"{h} heads, planned {p['num_heads']}")
            ps = p["page_size"]
            flat_pages = p["kv_indices"]
            o_all = torch.zeros(n, h, 512, dtype=torch.float32)
            lse_all = torch.full((n, h), -math.inf, dtype=torch.float32)
            q_all = torch.cat([q_nope, q_pe], dim=-1).float()
            for i in range(p["qo_indptr"].numel() - 1):
                q0, q1 = int(p["qo_indptr"][i]), int(p["qo_indptr"][i + 1])
                qo_len, L = q1 - q0, int(p["kv_len"][i])
                if qo_len == 0 or L <= 0:
                    continue
                t = torch.arange(L)
                # The kernel reads page entries from one flat list at kv_indptr[i] + t // page:
                # a request given too few pages reads its neighbour's, or past the list's end
                # (undefined on the GPU; an error here).
                at = int(p["kv_indptr"][i]) + t // ps
                if int(at[-1]) >= flat_pages.numel():
                    raise IndexError(f"request {i} ({L} tokens, page {ps}) reads page-list entry "
                                     f"{int(at[-1])}; kv_indices has {flat_pages.numel()}")
                pages = flat_pages[at]
                slots = pages * ps + t % ps
                keys = torch.cat([torch_mla.gather_slots(ckv_cache, slots).float(),
                                  torch_mla.gather_slots(kpe_cache, slots).float()], dim=1)
                visible = None
                if p["causal"]:
                    s = torch.arange(qo_len)
                    last = s if bug == "causal_top_left" else L - qo_len + s
                    visible = (t[None, :] <= last[:, None]).repeat_interleave(h, dim=0)
                rows = q_all[q0:q1].reshape(qo_len * h, -1)
                o, l = torch_mla.attend(rows, keys, p["sm_scale"], visible)
                o_all[q0:q1] = o.reshape(qo_len, h, 512)
                # base 2 (the kernel's own exp2 domain) unless asked for base e; a row that sees
                # nothing keeps -inf (torch_mla's +inf is the suite's convention, not this one)
                lv = l if (return_lse_base_on_e or bug == "natural_lse") else l * LOG2E
                lv = torch.where(torch.isinf(l), torch.full_like(l, -math.inf), lv)
                lse_all[q0:q1] = lv.reshape(qo_len, h)
            o_all = o_all.to(q_nope.dtype)
            if out is not None:
                out.copy_(o_all)
                o_all = out
            if lse is not None:
                lse.copy_(lse_all)
                lse_all = lse
            return (o_all, lse_all) if return_lse else o_all

    return types.SimpleNamespace(
        __name__=__name__ + ("" if bug is None else "." + bug), __version__=__version__,
        BACKEND=BACKEND, BUG=bug, BatchMLAPagedAttentionWrapper=BatchMLAPagedAttentionWrapper)


_LIB = library()
BatchMLAPagedAttentionWrapper = _LIB.BatchMLAPagedAttentionWrapper
