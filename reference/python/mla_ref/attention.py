"""The attention core (FlashMLA decode convention, SCHEMA.md "Attention-core cases").

q [b, s_q, h, 576] = [q_nope W_UK (512) | roped q_pe (64)]; paged cache [nb, ps, 576] =
[normalized latent c (512) | roped k_pe (64)]; V = the first 512 columns of the same cache.
Dense: causal, query i of s_q attends to positions 0 .. L - s_q + i (L = cache_seqlens[b]).
Sparse: query row attends exactly to its valid indices (0 <= idx < L), no causal mask.
A row with nothing to attend: out 0, lse +inf. LSE is natural-log, of the scaled scores.

Two precisions:
  truth       float64 on the exact input values
  same_dtype  the deployed-precision reference: q and K,V as bf16 values in float32; scores
              = float32 matmul * float32(scale); max, exp(s - max), sum, lse = max + log(sum) and
              p = exp(s - max) / sum in float32; P = bf16(p); out = bf16(float32 P.V).
"""
from __future__ import annotations

import numpy as np
import torch

from . import exact, numerics

D_QK = 576
D_V = 512
SENTINEL_BLOCK_ID = 2147483647


# ---------------------------------------------------------------- paging

def pages_needed(lengths, page_size: int):
    return [-(-int(L) // page_size) for L in lengths]


def make_block_table(lengths, page_size: int, perm: np.ndarray, max_blocks: int | None = None):
    """Assigns physical blocks to sequences in the order given by `perm` (a permutation of the
    physical blocks; the first sum(pages) entries are used, in sequence order). Entries at or
    past ceil(L/ps) hold the sentinel. Returns (block_table int32 [b, mb], used mask [nb, ps])."""
    need = pages_needed(lengths, page_size)
    nb = len(perm)
    mb = max(need + [0]) if max_blocks is None else max_blocks
    assert sum(need) <= nb and mb >= max(need + [0])
    bt = np.full((len(lengths), mb), SENTINEL_BLOCK_ID, dtype=np.int32)
    used = np.zeros((nb, page_size), dtype=bool)
    k = 0
    for i, L in enumerate(lengths):
        for j in range(need[i]):
            blk = int(perm[k])
            k += 1
            bt[i, j] = blk
            n = min(page_size, int(L) - j * page_size)
            used[blk, :n] = True
    return bt, used


def gather(cache: np.ndarray, block_table: np.ndarray, i: int, L: int) -> np.ndarray:
    """Logical tokens 0..L-1 of sequence i from a physical cache [nb, ps, ...]."""
    ps = cache.shape[1]
    if L == 0:
        return cache[:0, 0]
    t = np.arange(L)
    blocks = block_table[i, t // ps].astype(np.int64)
    return cache[blocks, t % ps]


# ---------------------------------------------------------------- core

def _row_attention(q: torch.Tensor, K: torch.Tensor, valid: torch.Tensor | None, scale, same_dtype: bool):
    """q [n, 576] (n = rows sharing the key set, e.g. heads), K [T, 576], valid [n, T] bool or None.
    Returns out [n, 512], lse [n].

    The matmuls are laid out as K[T,576] @ qT[576,n] and P[n,T] @ V[T,512] with contiguous operands:
    with a reference (netlib) BLAS, as Debian's torch uses, other layouts are 2-3x slower.
    The truth (float64) takes its three sums — q·k, Σ exp, Σ exp·v — from exact.matmul, whose
    result does not depend on the BLAS's summation order, so only exp/log's last bit can differ
    between libraries; it divides by Σ exp once at the end."""
    n = q.shape[0]
    dt = q.dtype
    if K.shape[0] == 0:
        return torch.zeros((n, D_V), dtype=dt), torch.full((n,), float("inf"), dtype=dt)
    K = K.contiguous()
    V = K[:, :D_V].contiguous()
    mm = torch.matmul if same_dtype else exact.matmul
    s = mm(K, q.t().contiguous()).t() * scale  # [n, T]
    if valid is not None:
        s = s.masked_fill(~valid, float("-inf"))
    m = s.max(dim=-1, keepdim=True).values
    empty = torch.isinf(m) & (m < 0)  # nothing valid in the row
    m_safe = torch.where(empty, torch.zeros_like(m), m)
    e = torch.exp(s - m_safe).contiguous()
    if same_dtype:
        ssum = e.sum(dim=-1, keepdim=True)
        p = (e / torch.where(empty, torch.ones_like(ssum), ssum)).contiguous()
        p = numerics.round_bf16(p)
        out = numerics.round_bf16(torch.matmul(p, V))
    else:
        ssum = exact.matmul(e, torch.ones((e.shape[1], 1), dtype=dt))
        out = exact.matmul(e, V) / torch.where(empty, torch.ones_like(ssum), ssum)
    lse = (m_safe + torch.log(ssum)).squeeze(-1)
    out = torch.where(empty, torch.zeros_like(out), out)
    lse = torch.where(empty.squeeze(-1), torch.full_like(lse, float("inf")), lse)
    return out, lse


def attention(q: np.ndarray, cache: np.ndarray, block_table: np.ndarray, cache_seqlens: np.ndarray,
              softmax_scale: float, causal: bool = True, indices: np.ndarray | None = None,
              precision: str = "truth"):
    """q float64 [b, s_q, h, 576] (values), cache float64 [nb, ps, 576] (values; unused slots may be
    NaN: they are never read), block_table int32 [b, mb], cache_seqlens int32 [b],
    indices int32 [b, s_q, k] for sparse (then `causal` is ignored).
    precision: "truth" (float64) or "same_dtype" (see module doc; q and cache must hold bf16 values).
    Returns out float64 [b, s_q, h, 512], lse float64 [b, h, s_q]."""
    assert precision in ("truth", "same_dtype")
    same = precision == "same_dtype"
    dt = torch.float32 if same else torch.float64
    scale = torch.tensor(softmax_scale, dtype=torch.float64).to(dt)
    b, s_q, h, d = q.shape
    assert d == D_QK and cache.shape[-1] == D_QK
    out = np.zeros((b, s_q, h, D_V), dtype=np.float64)
    lse = np.zeros((b, h, s_q), dtype=np.float64)
    for i in range(b):
        L = int(cache_seqlens[i])
        if indices is None:
            K = torch.from_numpy(gather(cache, block_table, i, L)).to(dt)
            qi = torch.from_numpy(np.ascontiguousarray(q[i].reshape(s_q * h, D_QK))).to(dt)
            valid = None
            if causal and s_q > 1:
                lim = L - s_q + np.arange(s_q)  # last attended position per query
                v = np.arange(L)[None, :] <= lim[:, None]  # [s_q, L]
                valid = torch.from_numpy(np.repeat(v, h, axis=0))
            elif causal and s_q == 1:
                valid = None  # query 0 attends 0..L-1
            o, l = _row_attention(qi, K, valid, scale, same)
            out[i] = o.to(torch.float64).numpy().reshape(s_q, h, D_V)
            lse[i] = l.to(torch.float64).numpy().reshape(s_q, h).T
        else:
            for j in range(s_q):
                idx = indices[i, j].astype(np.int64)
                ok = (idx >= 0) & (idx < L)
                sel = idx[ok]
                assert len(np.unique(sel)) == len(sel), "valid indices of a row must be distinct"
                K = torch.from_numpy(gather(cache, block_table, i, L)[sel] if len(sel) else cache[:0, 0]).to(dt)
                qi = torch.from_numpy(np.ascontiguousarray(q[i, j])).to(dt)
                o, l = _row_attention(qi, K, None, scale, same)
                out[i, j] = o.to(torch.float64).numpy()
                lse[i, :, j] = l.to(torch.float64).numpy()
    return out, lse
