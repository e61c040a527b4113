"""What the C++ host does around a Python kernel's call, for tests that call the kernels
directly: give it inputs in its declared index numbering, and bring its lse back to the suite's
conventions (natural log, [b, h, s_q], +inf for an empty row) before judging.
(The certifier's own conversion is C++, core/include/mla/core/conventions.hpp.)"""
import math

import torch

import mla_door


def kernel_indices(kernel: mla_door.Kernel, indices, block_table, cache_seqlens, page_size):
    """Sparse indices as the kernel declared it takes them: positions as they are, or global
    slots (block · page_size + offset) with every invalid position (outside [0, L)) as -1."""
    if indices is None or kernel.conventions.indices == "positions":
        return indices
    out = torch.full_like(indices, -1)
    for i in range(indices.shape[0]):
        L = int(cache_seqlens[i])
        p = indices[i].long()
        ok = (p >= 0) & (p < L)
        blocks = block_table[i].long()[(p.clamp(0, max(L - 1, 0))) // page_size]
        slots = blocks * page_size + p.clamp(min=0) % page_size
        out[i] = torch.where(ok, slots, torch.full_like(slots, -1)).to(indices.dtype)
    return out


def lse_buffer(kernel: mla_door.Kernel, b: int, s_q: int, h: int):
    shape = (b, h, s_q) if kernel.conventions.lse_layout == "[b,h,s_q]" else (b, s_q, h)
    return torch.full(shape, math.nan, dtype=torch.float32)


def canonical_lse(kernel: mla_door.Kernel, lse: torch.Tensor) -> torch.Tensor:
    """The kernel's lse in the suite's conventions: natural log, [b, h, s_q], +inf empty rows."""
    c = kernel.conventions
    x = lse.double()
    if c.lse_layout == "[b,s_q,h]":
        x = x.transpose(1, 2)
    empty = x == (math.inf if c.empty_row_lse == "+inf" else -math.inf)
    if c.lse_base == "2":
        x = x * math.log(2.0)
    return torch.where(empty, torch.full_like(x, math.inf), x).contiguous()


def run(kernel: mla_door.Kernel, q, kv_cache, block_table, cache_seqlens, indices, call):
    """One call as the host makes it; returns out (the kernel's dtype) and the canonical lse."""
    b, s_q, h, _ = q.shape
    dt = torch.float32 if kernel.out_dtype == "f32" else torch.bfloat16
    out = torch.full((b, s_q, h, mla_door.D_V), math.nan, dtype=dt)
    lse = lse_buffer(kernel, b, s_q, h)
    kernel.decode(q, kv_cache, block_table, cache_seqlens,
                  kernel_indices(kernel, indices, block_table, cache_seqlens, call.page_size),
                  out, lse, call)
    return out, canonical_lse(kernel, lse)
