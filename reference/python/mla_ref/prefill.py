"""MLA prefill in the MHA form, as deployed prefill kernels compute it (README, "Prefill and merge").

Per head: q = [q_nope | roped q_pe] (nope + rope wide), k = [W_UK c | roped k_pe] with one k_pe
for every head, v = W_UV c; softmax scale = the layer's own (ModelArgs.softmax_scale: (nope +
rope)^-0.5, times mscale^2 under YaRN). A ragged batch is packed along the token axis and cut by
cu_seqlens_q / cu_seqlens_k. Causal masking is bottom-right aligned: query i of a sequence with
s_q queries and s_k keys attends keys j <= s_k - s_q + i, so chunked prefill over a cached prefix
is one case and s_k < s_q leaves the first rows with nothing to attend.

Canonical convention (the suite's decode core's, mla_ref.attention): out [total_q, h, d_v];
lse [h, total_q], natural log of the scaled scores' sum of exponentials; a row with nothing to
attend has out 0 and lse +inf. The converters below translate to the other conventions.

Pipelines
    fp64  float64 truth; its sums (q.k, sum exp, sum exp.v) from exact.matmul, so they do not
          depend on the BLAS's summation order; divides by sum exp once at the end
    fp32  float32 throughout, no rounding of intermediates
    bf16  as deployed (the decode core's same_dtype): q, k, v rounded to bf16 values, float32
          scores times float32(scale), float32 max / exp / sum, lse = max + log(sum), P rounded
          to bf16, out = bf16(float32 P.V)
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import exact, numerics
from .config import ModelArgs
from .layer import MLA

PIPELINES = ("fp64", "fp32", "bf16")
# 1/ln 2 and ln 2, correctly rounded, so the base conversions do not depend on the libm
LOG2_E = exact.to_float(exact._CTX.divide(exact.Decimal(1), exact.ln(2)))
LN_2 = exact.to_float(exact.ln(2))


# ---------------------------------------------------------------- inputs

def _assemble_k(k_nope: torch.Tensor, k_pe: torch.Tensor) -> torch.Tensor:
    """[k_nope | k_pe] per head; k_pe [b, s, rope] is shared: broadcast over the heads."""
    h = k_nope.shape[2]
    return torch.cat([k_nope, k_pe.unsqueeze(2).expand(-1, -1, h, -1)], dim=-1)


def mha_inputs(args: ModelArgs, weights: dict, x: np.ndarray, start_pos: int = 0, pipeline: str = "fp64"):
    """The MHA-form q, k, v of tokens x [b, s, dim] (float64 values of bf16) at positions
    start_pos .. start_pos + s - 1, through the layer's own steps (MLA.project, then W_UK / W_UV
    split of wkv_b as the naive form does it) in `pipeline`.
    Returns float64 numpy q [b, s, h, nope+rope], k [b, s, h, nope+rope], v [b, s, h, v_head_dim]."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}; known: {', '.join(PIPELINES)}")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3 or x.shape[-1] != args.dim:
        raise ValueError(f"x must be [b, s, {args.dim}], got {list(x.shape)}")
    m = MLA(args, weights, pipeline, "naive", x.shape[0])
    xt = m.R(torch.from_numpy(np.ascontiguousarray(x)).to(m.dtype))
    q_nope, q_pe, c, k_pe = m.project(xt, start_pos)
    k_full, v = m.naive_kv(c, k_pe)
    k = _assemble_k(k_full[..., :args.qk_nope_head_dim], k_pe)
    q = torch.cat([q_nope, q_pe], dim=-1)
    return tuple(t.to(torch.float64).numpy() for t in (q, k, v))


def pack(seqs) -> tuple:
    """[s_i, ...] arrays -> (the packed [sum s_i, ...] array, cu_seqlens int32 [n + 1])."""
    cu = np.zeros(len(seqs) + 1, dtype=np.int32)
    cu[1:] = np.cumsum([len(s) for s in seqs])
    return np.concatenate(seqs, axis=0), cu


# ---------------------------------------------------------------- attention

def _causal_valid(s_q: int, s_k: int) -> np.ndarray:
    """[s_q, s_k] bool: bottom-right aligned, query i attends keys j <= s_k - s_q + i."""
    lim = s_k - s_q + np.arange(s_q)
    return np.arange(s_k)[None, :] <= lim[:, None]


def _heads_attention(q, k, v, valid, scale, pipeline):
    """q [h, s_q, d], k [h, s_k, d], v [h, s_k, dv] (pipeline dtype), valid [s_q, s_k] bool or
    None. Returns out [h, s_q, dv], lse [h, s_q] (pipeline dtype)."""
    h, s_q, _ = q.shape
    dt = q.dtype
    if k.shape[1] == 0 or s_q == 0:
        return torch.zeros((h, s_q, v.shape[-1]), dtype=dt), torch.full((h, s_q), math.inf, dtype=dt)
    mm = exact.matmul if pipeline == "fp64" else torch.matmul
    s = mm(q.contiguous(), k.transpose(1, 2).contiguous()) * scale  # [h, s_q, s_k]
    if valid is not None:
        s = s.masked_fill(~torch.from_numpy(valid)[None], -math.inf)
    m = s.max(dim=-1, keepdim=True).values
    empty = torch.isinf(m) & (m < 0)  # nothing valid in the row
    m_safe = torch.where(empty, torch.zeros_like(m), m)
    e = torch.exp(s - m_safe).contiguous()
    if pipeline == "fp64":
        ssum = exact.matmul(e, torch.ones((h, e.shape[-1], 1), dtype=dt))
        out = exact.matmul(e, v.contiguous()) / torch.where(empty, torch.ones_like(ssum), ssum)
    else:
        ssum = e.sum(dim=-1, keepdim=True)
        p = e / torch.where(empty, torch.ones_like(ssum), ssum)
        if pipeline == "bf16":
            out = numerics.round_bf16(torch.matmul(numerics.round_bf16(p), v))
        else:
            out = torch.matmul(p, v)
    lse = (m_safe + torch.log(ssum)).squeeze(-1)
    out = torch.where(empty, torch.zeros_like(out), out)
    lse = torch.where(empty.squeeze(-1), torch.full_like(lse, math.inf), lse)
    return out, lse


def _check_varlen(q, k, v, cu_q, cu_k):
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError(f"q, k, v must be [tokens, h, d]; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if q.shape[1] != k.shape[1] or k.shape[1] != v.shape[1] or q.shape[2] != k.shape[2] or k.shape[0] != v.shape[0]:
        raise ValueError(f"q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} disagree on heads, width or keys")
    if len(cu_q) != len(cu_k) or len(cu_q) < 1:
        raise ValueError(f"cu_seqlens_q ({len(cu_q)}) and cu_seqlens_k ({len(cu_k)}) must have the same length >= 1")
    for name, cu, n in (("cu_seqlens_q", cu_q, q.shape[0]), ("cu_seqlens_k", cu_k, k.shape[0])):
        if cu[0] != 0 or np.any(np.diff(cu) < 0) or cu[-1] != n:
            raise ValueError(f"{name} must start at 0, not decrease and end at {n}; got {list(cu)}")


def prefill_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal: bool, scale: float, pipeline: str = "fp64"):
    """Varlen MHA attention. q [total_q, h, d], k [total_k, h, d], v [total_k, h, dv] (float64
    values); sequence i is rows cu_seqlens_q[i]:cu_seqlens_q[i+1] of q against rows
    cu_seqlens_k[i]:cu_seqlens_k[i+1] of k, v; causal bottom-right aligned (module doc).
    Returns the canonical out float64 [total_q, h, dv] and lse float64 [h, total_q]."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}; known: {', '.join(PIPELINES)}")
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    cu_q = np.asarray(cu_seqlens_q, dtype=np.int64)
    cu_k = np.asarray(cu_seqlens_k, dtype=np.int64)
    _check_varlen(q, k, v, cu_q, cu_k)
    dt = torch.float64 if pipeline == "fp64" else torch.float32
    sc = torch.tensor(scale, dtype=torch.float64).to(dt)

    def operand(a):  # [tokens, h, d] -> [h, tokens, d] in the pipeline's precision
        t = torch.from_numpy(np.ascontiguousarray(a.transpose(1, 0, 2))).to(dt)
        return numerics.round_bf16(t) if pipeline == "bf16" else t

    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), dtype=np.float64)
    lse = np.zeros((q.shape[1], q.shape[0]), dtype=np.float64)
    for i in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
        valid = _causal_valid(q1 - q0, k1 - k0) if causal else None
        o, l = _heads_attention(operand(q[q0:q1]), operand(k[k0:k1]), operand(v[k0:k1]), valid, sc, pipeline)
        out[q0:q1] = o.to(torch.float64).numpy().transpose(1, 0, 2)
        lse[:, q0:q1] = l.to(torch.float64).numpy()
    return out, lse


# ---------------------------------------------------------------- lse conventions
# canonical: natural log, [h, total_q], empty row +inf (FlashAttention 2's flash_attn_varlen_func).
# FlashAttention 3 writes -inf for an empty row; FlashInfer's ragged prefill and merge_state use
# base 2 and [total_q, h] (docs/field.md). Infinite lse values mean "empty" in every convention.

def lse_to_base2(lse: np.ndarray) -> np.ndarray:
    """Natural log -> base 2 (log2 x = ln x · log2 e); infinities keep their sign."""
    return np.asarray(lse, dtype=np.float64) * LOG2_E


def lse_from_base2(lse2: np.ndarray) -> np.ndarray:
    """Base 2 -> natural log (ln x = log2 x · ln 2); infinities keep their sign."""
    return np.asarray(lse2, dtype=np.float64) * LN_2


def lse_token_major(lse: np.ndarray) -> np.ndarray:
    """[h, total_q] -> [total_q, h]."""
    return np.ascontiguousarray(np.asarray(lse).T)


def lse_head_major(lse: np.ndarray) -> np.ndarray:
    """[total_q, h] -> [h, total_q]."""
    return np.ascontiguousarray(np.asarray(lse).T)


def lse_empty_as(lse: np.ndarray, value: float) -> np.ndarray:
    """Every empty row's lse (any infinite value) written as `value` (+inf for FlashAttention 2
    and the canonical form, -inf for FlashAttention 3 and FlashInfer)."""
    if not (math.isinf(value)):
        raise ValueError(f"an empty row's lse must be +inf or -inf, got {value}")
    lse = np.array(lse, dtype=np.float64)
    lse[np.isinf(lse)] = value
    return lse
