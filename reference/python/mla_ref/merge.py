"""Merging two partial attention states over disjoint key sets (README, "Prefill and merge").

    lse = log(e^lse_a + e^lse_b),  out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b

Both evaluated relative to m = max(lse_a, lse_b), so no exponential overflows however far apart
the two are. Any infinite lse means "that side attended nothing" (FlashAttention 2 writes +inf,
FlashAttention 3 and FlashInfer -inf): its weight is 0 and its out is never read (it may hold
anything, NaN included). Both sides empty: out 0 and lse -inf (log 0), never NaN.

Layout: the canonical one of mla_ref.prefill, out [n, h, d] and lse [h, n]; base e unless
base="2" (FlashInfer's merge_state: exp2 / log2 throughout).

Arithmetic
    truth     float64, out float64 (not rounded)
    deployed  float32 (inputs rounded to float32), weights w = exp(lse - m) / (w_a + w_b) as
              FlashInfer's merge_state forms them, out rounded to out_dtype (bf16, fp16, fp32)
"""
from __future__ import annotations

import numpy as np
import torch

from . import numerics

OUT_DTYPES = ("bf16", "fp16", "fp32")
ARITHMETICS = ("truth", "deployed")


def _round_out(o: torch.Tensor, out_dtype: str) -> np.ndarray:
    """float32 -> the values of out_dtype (round to nearest even), as float64."""
    if out_dtype == "bf16":
        o = numerics.round_bf16(o)
    elif out_dtype == "fp16":
        o = o.to(torch.float16).to(torch.float32)
    return o.to(torch.float64).numpy()


def _check(out_a, lse_a, out_b, lse_b):
    if out_a.shape != out_b.shape or lse_a.shape != lse_b.shape:
        raise ValueError(f"the two states differ in shape: out {list(out_a.shape)} vs {list(out_b.shape)}, "
                         f"lse {list(lse_a.shape)} vs {list(lse_b.shape)}")
    if out_a.ndim != 3 or lse_a.shape != (out_a.shape[1], out_a.shape[0]):
        raise ValueError(f"out must be [n, h, d] and lse [h, n]; got out {list(out_a.shape)}, lse {list(lse_a.shape)}")
    if np.isnan(lse_a).any() or np.isnan(lse_b).any():
        raise ValueError("an lse is NaN: a partial state's lse is finite or, for an empty side, infinite")


def merge_states(out_a, lse_a, out_b, lse_b, out_dtype: str = "fp32", arithmetic: str = "truth", base: str = "e"):
    """Merges state a and state b (module doc). Returns (out float64 [n, h, d], lse float64 [h, n]);
    out_dtype only matters for the deployed arithmetic (the truth is not rounded)."""
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"unknown out_dtype {out_dtype!r}; known: {', '.join(OUT_DTYPES)}")
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"unknown arithmetic {arithmetic!r}; known: {', '.join(ARITHMETICS)}")
    if base not in ("e", "2"):
        raise ValueError(f"unknown lse base {base!r}; known: e, 2")
    out_a, lse_a, out_b, lse_b = (np.asarray(t, dtype=np.float64) for t in (out_a, lse_a, out_b, lse_b))
    _check(out_a, lse_a, out_b, lse_b)
    dt = torch.float64 if arithmetic == "truth" else torch.float32
    exp_, log_ = (torch.exp, torch.log) if base == "e" else (torch.exp2, torch.log2)

    def state(o, l):  # lse as [n, h, 1]; empty: lse -inf and out 0, so it contributes nothing
        lt = torch.from_numpy(np.ascontiguousarray(l.T)).to(dt)[..., None]
        empty = torch.isinf(lt)
        ot = torch.where(empty, torch.zeros(1, dtype=dt), torch.from_numpy(o).to(dt))
        return ot, torch.where(empty, torch.full_like(lt, -np.inf), lt), empty

    oa, la, ea = state(out_a, lse_a)
    ob, lb, eb = state(out_b, lse_b)
    both = ea & eb
    m = torch.where(both, torch.zeros_like(la), torch.maximum(la, lb))  # finite: one side is not empty
    wa, wb = exp_(la - m), exp_(lb - m)  # exp(-inf) = 0 for an empty side; the larger side's is 1
    ssum = wa + wb  # in [1, 2] unless both are empty
    ssum_safe = torch.where(both, torch.ones_like(ssum), ssum)
    out = oa * (wa / ssum_safe) + ob * (wb / ssum_safe)
    lse = torch.where(both, torch.full_like(m, -np.inf), m + log_(ssum_safe))
    out = torch.where(both, torch.zeros_like(out), out)
    lse_np = lse[..., 0].to(torch.float64).numpy().T.copy()
    out_np = out.to(torch.float64).numpy() if arithmetic == "truth" else _round_out(out, out_dtype)
    return out_np, lse_np
