"""Kernels the door's tests certify through `mla certify --python`: one plain, correct torch
decode in the suite's canonical conventions, and variants of it that each carry one fault the
certifier must name (suites/certify/test_certify_python.cpp)."""
import ctypes
import math
import os
import signal

import torch

import mla_door
from mla_door import Caps, Kernel, bf16_cache


def reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    """Canonical: lse natural log [b,h,s_q], +inf for an empty row, indices as positions."""
    b, s_q, h, _ = q.shape
    ps = call.page_size
    kv = bf16_cache(kv_cache)
    for bi in range(b):
        L = int(cache_seqlens[bi])
        blocks = block_table[bi, : (L + ps - 1) // ps].long()
        tokens = kv[blocks].reshape(-1, mla_door.D_QK)[:L].float()
        for s in range(s_q):
            if indices is None:
                last = min(L - s_q + s if call.causal else L - 1, L - 1)
                pos = torch.arange(0, max(last + 1, 0))
            else:
                row = indices[bi, s].long()
                pos = row[(row >= 0) & (row < L)]
            if pos.numel() == 0:
                out[bi, s] = 0
                lse[bi, :, s] = float("inf")
                continue
            k = tokens[pos]
            scores = (q[bi, s].float() @ k.T) * call.softmax_scale
            m = scores.max(dim=1, keepdim=True).values
            p = torch.exp(scores - m)
            l = p.sum(dim=1, keepdim=True)
            out[bi, s] = ((p @ k[:, : mla_door.D_V]) / l).to(out.dtype)
            lse[bi, :, s] = (m + torch.log(l)).squeeze(1)


CAPS = Caps(cache_formats=("bf16",), dense=True, sparse=True, heads=(1, 128), s_q=(1, 64))
GOOD = Kernel(name="door_good", version="1", description="plain torch decode, canonical conventions",
              decode=reference_decode, caps=CAPS)


def _writes_past_out(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    ctypes.memset(out.data_ptr() + out.numel() * out.element_size(), 0x5A, 64)  # a native overrun


def _changes_q(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    q[0, 0, 0, 0] = q[0, 0, 0, 0] + 1


_calls = [0]


def _drifts(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    reference_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call)
    _calls[0] += 1
    if _calls[0] >= 3:  # state kept across calls: a later call's bits differ
        out.view(-1)[-1] += 0.5


def _raises(*args):
    raise ValueError("the door's test kernel refuses to work")


def _killed(*args):
    os.kill(os.getpid(), signal.SIGKILL)


def _variant(name, decode, **kw):
    return Kernel(name=name, version="1", description=f"door test: {name}", decode=decode,
                  caps=kw.pop("caps", CAPS), **kw)


WRITES_PAST_OUT = _variant("door_writes_past_out", _writes_past_out)
CHANGES_Q = _variant("door_changes_q", _changes_q)
DRIFTS = _variant("door_drifts", _drifts)
RAISES = _variant("door_raises", _raises)
KILLED = _variant("door_killed", _killed)
BAD_HEADS = _variant("door_bad_heads", reference_decode, caps=Caps(heads=(0, 128)))
NO_CUDA_HERE = _variant("door_cuda", reference_decode, backend="cuda")


def make_good():
    """A zero-argument callable returning a Kernel (how an adapter imports its library lazily)."""
    return GOOD


NOT_A_KERNEL = 42


def flashinfer_style_decode(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    """FlashInfer's conventions: lse in base 2 shaped [b, s_q, h], -inf for an empty row; sparse
    indices are global cache slots (block * page_size + offset), -1 the only invalid value."""
    b, s_q, h, _ = q.shape
    ps = call.page_size
    flat = bf16_cache(kv_cache).reshape(-1, mla_door.D_QK)
    for bi in range(b):
        L = int(cache_seqlens[bi])
        for s in range(s_q):
            if indices is None:
                last = min(L - s_q + s if call.causal else L - 1, L - 1)
                pos = torch.arange(0, max(last + 1, 0))
                slots = block_table[bi, (pos // ps)].long() * ps + pos % ps
            else:
                row = indices[bi, s].long()
                slots = row[row != -1]
            if slots.numel() == 0:
                out[bi, s] = 0
                lse[bi, s, :] = float("-inf")
                continue
            k = flat[slots].float()
            scores = (q[bi, s].float() @ k.T) * call.softmax_scale
            m = scores.max(dim=1, keepdim=True).values
            p = torch.exp(scores - m)
            l = p.sum(dim=1, keepdim=True)
            out[bi, s] = ((p @ k[:, : mla_door.D_V]) / l).to(out.dtype)
            lse[bi, s, :] = ((m + torch.log(l)) / math.log(2)).squeeze(1)


FLASHINFER_STYLE = _variant("door_flashinfer_style", flashinfer_style_decode,
                            conventions=mla_door.Conventions(lse_base="2", lse_layout="[b,s_q,h]",
                                                             empty_row_lse="-inf", indices="global_slots"))
# The same code declaring the canonical conventions: its lse and its indices are read wrongly.
FLASHINFER_STYLE_UNDECLARED = _variant("door_flashinfer_undeclared", flashinfer_style_decode)


def _only_three_heads(shape):
    return None if shape.heads == 3 else f"this test kernel does {shape.heads} heads only as 3"


CLAIMS_THREE_HEADS = _variant("door_three_heads", reference_decode, can_implement=_only_three_heads)


def _refuses(q, kv_cache, block_table, cache_seqlens, indices, out, lse, call):
    raise mla_door.Unsupported(f"page size {call.page_size} not today")


REFUSES = _variant("door_refuses", _refuses)
