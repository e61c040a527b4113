"""FlashMLA's sparse prefill (`flash_mla_sparse_fwd`): the attention DeepSeek-V3.2 runs during
prefill over each query's top-k positions, in the absorbed form (one latent key/value head).

    q [s_q, h, d_qk], kv [s_kv, d_qk] (FlashMLA's [s_kv, 1, d_qk]), indices [s_q, topk] (its
    [s_q, 1, topk]), sm_scale, d_v (512) -> out [s_q, h, d_v], max_logits [s_q, h], lse [s_q, h]

No batch dimension: a prefill's tokens are rows of one call. Per row i, entry j of indices[i] is
a key when 0 <= idx < s_kv and, with `topk_length`, j < topk_length[i]; anything else (-1, a
negative of any size down to INT32_MIN, s_kv and beyond up to INT32_MAX, an entry past the row's
topk_length) is no key. The keys are gathered as given, so an index that appears twice is
attended twice (FlashMLA's own reference gathers and does the same). Scores
s = sm_scale * q . kv[idx] over all d_qk columns; V = the first d_v columns of the same rows.
  max_logits = max_j s_j                        (-inf when the row has no key)
  lse        = ln sum_j exp(s_j)                (natural log; +inf when the row has no key)
  out        = sum_j exp(s_j - lse_o) V_j,  lse_o = ln(exp(lse) + exp(attn_sink[h]))
With `attn_sink` (one logit per head that takes probability mass without a value: out shrinks by
1 / (1 + exp(sink - lse))), lse and max_logits stay those of the keys alone. A row with no key:
out 0, max_logits -inf, lse +inf, whatever the sink.

Two precisions, as the decode core (attention.py):
  truth       float64 on the exact input values; the sums through exact.matmul (independent of
              the BLAS's summation order)
  same_dtype  q and kv as bf16 values in float32; scores a float32 matmul times float32(scale);
              max, exp(s - max), the sum (and the sink's exp(sink - max)) in float32; P rounded to
              bf16; out = bf16(float32 P . V); lse = max + log(sum) in float32
"""
from __future__ import annotations

import numpy as np
import torch

from . import exact, numerics

D_QKS = (576, 512)  # with and without the rope part (FlashMLA takes both)
D_V = 512
PRECISIONS = ("truth", "same_dtype")


def _check(q, kv, indices, d_v, attn_sink, topk_length):
    if q.ndim != 3:
        raise ValueError(f"q must be [s_q, h, d_qk], got shape {q.shape}")
    s_q, h, d_qk = q.shape
    if d_qk not in D_QKS:
        raise ValueError(f"d_qk {d_qk}: FlashMLA's sparse prefill takes {' or '.join(map(str, D_QKS))}")
    if kv.ndim == 3 and kv.shape[1] == 1:
        kv = kv[:, 0]
    if kv.ndim != 2 or kv.shape[1] != d_qk:
        raise ValueError(f"kv must be [s_kv, {d_qk}] or [s_kv, 1, {d_qk}], got shape {kv.shape}")
    if indices.ndim == 3 and indices.shape[1] == 1:
        indices = indices[:, 0]
    if indices.ndim != 2 or indices.shape[0] != s_q:
        raise ValueError(f"indices must be [{s_q}, topk] or [{s_q}, 1, topk], got shape {indices.shape}")
    if not np.issubdtype(indices.dtype, np.integer):
        raise ValueError(f"indices must be integers, got {indices.dtype}")
    if not 0 < d_v <= d_qk:
        raise ValueError(f"d_v {d_v} must be in [1, d_qk = {d_qk}] (V is the first d_v columns of kv)")
    if attn_sink is not None:
        attn_sink = np.asarray(attn_sink, dtype=np.float64)
        if attn_sink.shape != (h,) or np.isnan(attn_sink).any():
            raise ValueError(f"attn_sink must be [{h}] (one per head) without NaN, got shape {attn_sink.shape}")
    if topk_length is not None:
        topk_length = np.asarray(topk_length)
        topk = indices.shape[1]
        if topk_length.shape != (s_q,) or (topk_length < 0).any() or (topk_length > topk).any():
            raise ValueError(f"topk_length must be [{s_q}] with values in [0, {topk}]")
    return kv, indices, attn_sink, topk_length


def valid_keys(indices: np.ndarray, s_kv: int, topk_length: np.ndarray | None = None) -> np.ndarray:
    """bool [s_q, topk]: which entries are keys (see the module doc)."""
    idx = np.asarray(indices).astype(np.int64)
    ok = (idx >= 0) & (idx < s_kv)
    if topk_length is not None:
        ok &= np.arange(idx.shape[1])[None, :] < np.asarray(topk_length)[:, None]
    return ok


def sparse_prefill(q: np.ndarray, kv: np.ndarray, indices: np.ndarray, sm_scale: float, d_v: int = D_V,
                   attn_sink: np.ndarray | None = None, topk_length: np.ndarray | None = None,
                   precision: str = "truth"):
    """Returns (out [s_q, h, d_v], max_logits [s_q, h], lse [s_q, h]), float64 arrays (values of
    the precision's types). q, kv: float64 values (bf16 values for same_dtype)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    q = np.asarray(q, dtype=np.float64)
    kv, indices, attn_sink, topk_length = _check(q, np.asarray(kv, dtype=np.float64), np.asarray(indices), d_v,
                                                 attn_sink, topk_length)
    same = precision == "same_dtype"
    dt = torch.float32 if same else torch.float64
    scale = torch.tensor(sm_scale, dtype=torch.float64).to(dt)
    s_q, h, _ = q.shape
    ok = valid_keys(indices, kv.shape[0], topk_length)
    out = np.zeros((s_q, h, d_v))
    max_logits = np.full((s_q, h), -np.inf)
    lse = np.full((s_q, h), np.inf)
    sink = None if attn_sink is None else torch.from_numpy(attn_sink).to(dt)[:, None]  # [h, 1]
    kv_t = torch.from_numpy(kv).to(dt)
    for i in range(s_q):
        sel = np.asarray(indices[i]).astype(np.int64)[ok[i]]
        if len(sel) == 0:
            continue  # no key: out 0, max_logits -inf, lse +inf
        K = kv_t[torch.from_numpy(sel)].contiguous()  # [n, d_qk], duplicates kept
        V = K[:, :d_v].contiguous()
        qi = torch.from_numpy(np.ascontiguousarray(q[i])).to(dt)  # [h, d_qk]
        mm = torch.matmul if same else exact.matmul
        s = mm(K, qi.t().contiguous()).t() * scale  # [h, n]
        m = s.max(dim=-1, keepdim=True).values
        e = torch.exp(s - m).contiguous()
        if same:
            ssum = e.sum(dim=-1, keepdim=True)
        else:
            ssum = exact.matmul(e, torch.ones((e.shape[1], 1), dtype=dt))
        denom = ssum if sink is None else ssum + torch.exp(sink - m)
        if same:
            o = numerics.round_bf16(torch.matmul(numerics.round_bf16((e / denom).contiguous()), V))
        else:
            o = exact.matmul(e, V) / denom
        out[i] = o.to(torch.float64).numpy()
        max_logits[i] = m.squeeze(-1).to(torch.float64).numpy()
        lse[i] = (m + torch.log(ssum)).squeeze(-1).to(torch.float64).numpy()
    return out, max_logits, lse
