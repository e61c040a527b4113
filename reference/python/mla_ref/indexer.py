"""DeepSeek-V3.2's lightning indexer (upstream `Indexer.forward`, inference/model.py), step by step.

Per step (b batch, s tokens of the step, t cached positions, H index heads of width D = 128):
  q = wq_b(qr) as [b, s, H, D];  k = LayerNorm(wk(x)) [b, s, D]  (weight and bias, eps 1e-6)
  RoPE on the FIRST `qk_rope_head_dim` columns of q and k (MLA puts nope first; the indexer puts
      rope first), with the MLA layer's own YaRN frequencies; the pair layout is a parameter
  q, k = Hadamard(q), Hadamard(k), scaled D^-1/2 (an orthogonal rotation: q.k is unchanged in exact
      arithmetic, but the rotation spreads outliers over the block before it is quantized)
  (q8, q_scale), (k8, k_scale) = act_quant(q), act_quant(k)  (numerics.act_quant: e4m3, one scale
      per 128 values, so one per head of q and one per token of k)
  w = weights_proj(x) * H^-1/2 * q_scale * D^-1/2                       [b, s, H]
  logits[b, s, t] = k_scale[t] * sum_h w[h] * relu(q8[h] . k8[t])      (fp8_index)
  + the causal mask; the indices of the top min(index_topk, end_pos) logits of each row.
The layer's attention then keeps only the selected positions.

Stages (each its own function, so that a kernel for any one of them can be judged alone)
  project          q, k after RoPE and Hadamard, and weights_proj(x): fp64 (the truth) or bf16
                   (as deployed: float32 arithmetic rounded to bf16 where upstream holds bf16)
  quantize         act_quant of q and k, and the head weights w in upstream's order
  logits_truth     the float64 logits of given quantized operands: what a kernel is judged against
  logits_deployed  the kernel's float32 arithmetic on the same operands
  causal_mask, topk, forward (all of it for one step, with the FP8 key cache)
Upstream's published model quantizes the wq_b and wk weights to FP8 as well (its `dtype: fp8`);
here every weight is a bf16 value (its `dtype: bf16` path), as in the rest of the reference.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from . import exact, generator, numerics, rope
from .config import ModelArgs

PRECISIONS = ("fp64", "bf16")
# interleaved: the pairs (2i, 2i+1), upstream's published inference code (view_as_complex);
# half: the pairs (i, i + r/2) (the NeoX / rotate-half convention). Deployments of the indexer
# differ on this, and which one a checkpoint was trained with cannot be seen from its weights, so
# it is always named by the caller.
ROPE_LAYOUTS = ("interleaved", "half")
LN_EPS = 1e-6
BLOCK = numerics.BLOCK

WEIGHT_STREAMS = {"wq_b": 21, "wk": 22, "k_norm_weight": 23, "k_norm_bias": 24, "weights_proj": 25}


def _check_args(args: ModelArgs) -> None:
    # fp8_index takes one scale per (token, head): act_quant must produce exactly one block per head
    if args.index_head_dim != BLOCK:
        raise ValueError(f"index_head_dim must be {BLOCK} (one act_quant block per head, as fp8_index "
                         f"takes one scale per head), got {args.index_head_dim}")
    if not 0 < args.qk_rope_head_dim < args.index_head_dim or args.qk_rope_head_dim % 2:
        raise ValueError(f"qk_rope_head_dim {args.qk_rope_head_dim} must be even and inside the index head "
                         f"({args.index_head_dim})")
    if args.q_lora_rank <= 0:
        raise ValueError("the indexer reads the q-LoRA activation qr: q_lora_rank must be > 0")


def weight_shapes(args: ModelArgs) -> dict:
    H, D = args.index_n_heads, args.index_head_dim
    return {"wq_b": (H * D, args.q_lora_rank), "wk": (D, args.dim), "k_norm_weight": (D,),
            "k_norm_bias": (D,), "weights_proj": (H, args.dim)}


def weight_generators(args: ModelArgs, seed: int) -> dict:
    """Generated bf16 weights: linear layers with std fan_in^-0.5, the LayerNorm weight mean 1
    std 0.1 and its bias mean 0 std 0.1 (a zero bias would leave the bias term untested)."""
    out = {}
    for name, shp in weight_shapes(args).items():
        mean, std = {"k_norm_weight": (1.0, 0.1), "k_norm_bias": (0.0, 0.1)}.get(name, (0.0, float(shp[-1]) ** -0.5))
        out[name] = generator.GeneratedTensor(seed, WEIGHT_STREAMS[name], shp, "bfloat16", mean, std)
    return out


# ---------------------------------------------------------------- building blocks

def hadamard_matrix(n: int) -> np.ndarray:
    """The n x n Sylvester Hadamard matrix (entries +-1, int64), n a power of two:
    H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]]; symmetric, H H = n I. This is the matrix of the
    fast Walsh-Hadamard transform in natural order (what fast_hadamard_transform applies)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard size must be a power of two, got {n}")
    h = np.ones((1, 1), dtype=np.int64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def hadamard(x: torch.Tensor, precision: str) -> torch.Tensor:
    """x @ H * n^-1/2 over the last axis (n = its size; H symmetric, so row or column form agree).

    fp64: float64 x; the product through exact.matmul (independent of the BLAS's summation order),
          times n^-1/2 correctly rounded: within an ulp or two of the real result.
    bf16: x holds bf16 values in float32; the butterflies in float32 (log2 n stages of a +- b),
          times float32(n^-1/2), rounded to bf16 (the kernel reads bf16, computes in float32,
          writes bf16; its butterfly order may differ by float32 ulps before that rounding)."""
    n = x.shape[-1]
    if precision == "fp64":
        h = torch.from_numpy(hadamard_matrix(n).astype(np.float64))
        return exact.matmul(x.contiguous(), h) * exact.inv_sqrt(n)
    _check_precision(precision)
    hadamard_matrix(n)  # validates n
    y = x.to(torch.float32)
    lead = y.shape[:-1]
    span = 1
    while span < n:  # stage: pairs (j, j + span) inside blocks of 2*span
        y = y.reshape(lead + (n // (2 * span), 2, span))
        a, b = y[..., 0, :], y[..., 1, :]
        y = torch.stack([a + b, a - b], dim=-2)
        span *= 2
    y = y.reshape(lead + (n,)) * torch.tensor(exact.inv_sqrt(n), dtype=torch.float64).to(torch.float32)
    return numerics.round_bf16(y)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotates x [..., s, (h,) r] by the angles whose cos/sin [s, r/2] are given, in x's dtype.

    interleaved: (x[2i], x[2i+1]) is pair i;  half: (x[i], x[i + r/2]) is pair i.
    Pair i -> (a cos - b sin, a sin + b cos): a complex multiplication, as upstream does it."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"unknown rope layout {layout!r}; known: {', '.join(ROPE_LAYOUTS)}")
    r = x.shape[-1]
    if x.dim() == 4:  # [b, s, h, r]
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    else:  # [b, s, r]
        cos, sin = cos[None], sin[None]
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    a, b = x[..., :r // 2], x[..., r // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")


class Projected(NamedTuple):
    """project()'s result, float64 numpy (bf16 values for precision bf16).
    q [b, s, H, D], k [b, s, D]: after RoPE (rope columns first) and the Hadamard rotation;
    weights_proj [b, s, H]: weights_proj(x) * H^-1/2 (before the quantization scales)."""
    q: np.ndarray
    k: np.ndarray
    weights_proj: np.ndarray


def project(args: ModelArgs, weights: dict, x: np.ndarray, qr: np.ndarray, start_pos: int, rope_layout: str,
            precision: str) -> Projected:
    """Everything before the quantization, for one step.

    x [b, s, dim] and qr [b, s, q_lora_rank] (the MLA layer's normalized q-LoRA activation): float64
    arrays of bf16 values; weights: float64 arrays (weight_shapes) of bf16 values; tokens sit at
    positions start_pos .. start_pos + s - 1 (the RoPE angles).
    fp64: float64 throughout, every sum (the linears, LayerNorm's mean and variance, the Hadamard)
          through exact.matmul, so the result does not depend on the BLAS's summation order.
    bf16: upstream's dtypes: each linear a float32 product rounded to bf16; LayerNorm in float32
          (torch's layer_norm) rounded to bf16; RoPE in float32 (cos/sin of the float64 angle
          rounded to float32, the reference's table rule) rounded to bf16; Hadamard as hadamard();
          weights_proj(x) bf16, times float32(H^-1/2) rounded to bf16 (bf16 times a Python float)."""
    _check_args(args)
    _check_precision(precision)
    if rope_layout not in ROPE_LAYOUTS:
        raise ValueError(f"unknown rope layout {rope_layout!r}; known: {', '.join(ROPE_LAYOUTS)}")
    fp64 = precision == "fp64"
    dt = torch.float64 if fp64 else torch.float32
    R = (lambda t: t) if fp64 else numerics.round_bf16
    t = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)).to(dt) for k, v in weights.items()}
    xt = R(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(dt))
    qrt = R(torch.from_numpy(np.ascontiguousarray(qr, dtype=np.float64)).to(dt))
    b, s, _ = xt.shape
    H, D, rd = args.index_n_heads, args.index_head_dim, args.qk_rope_head_dim

    def linear(v, w):
        return exact.matmul(v.contiguous(), w.t().contiguous()) if fp64 else R(torch.matmul(v, w.t()))

    c64, s64 = rope.cos_sin(args, start_pos, s)
    cos, sin = torch.from_numpy(c64).to(dt), torch.from_numpy(s64).to(dt)
    q = linear(qrt, t["wq_b"]).reshape(b, s, H, D)
    q = torch.cat([R(apply_rope(q[..., :rd], cos, sin, rope_layout)), q[..., rd:]], dim=-1)
    k = linear(xt, t["wk"])
    if fp64:
        ones = torch.ones((D, 1), dtype=dt)
        mean = exact.matmul(k.contiguous(), ones) / D
        var = exact.matmul(((k - mean) ** 2).contiguous(), ones) / D
        k = (k - mean) / torch.sqrt(var + LN_EPS) * t["k_norm_weight"] + t["k_norm_bias"]
    else:
        k = R(F.layer_norm(k, (D,), t["k_norm_weight"], t["k_norm_bias"], LN_EPS))
    k = torch.cat([R(apply_rope(k[..., :rd], cos, sin, rope_layout)), k[..., rd:]], dim=-1)
    q, k = hadamard(q, precision), hadamard(k, precision)
    wp = linear(xt, t["weights_proj"])
    wp = wp * exact.inv_sqrt(H) if fp64 else R(wp * torch.tensor(exact.inv_sqrt(H), dtype=torch.float64).float())
    return Projected(*(v.to(torch.float64).numpy() for v in (q, k, wp)))


# ---------------------------------------------------------------- quantization and logits

class Quantized(NamedTuple):
    """quantize()'s result. q_codes uint8 [b, s, H, D] and k_codes uint8 [b, s, D]: e4m3fn codes;
    q_scale float32 [b, s, H], k_scale float32 [b, s]: their block scales (one block per head);
    weights [b, s, H]: the head weights fp8_index multiplies each relu(q8 . k8) by (float32
    values for precision bf16, float64 for fp64)."""
    q_codes: np.ndarray
    q_scale: np.ndarray
    k_codes: np.ndarray
    k_scale: np.ndarray
    weights: np.ndarray


def quantize(args: ModelArgs, p: Projected, scale_fmt: str, precision: str) -> Quantized:
    """act_quant of q and k (scale_fmt "ue8m0": power-of-two scales; "fp32": float32 scales) and
    w = weights_proj * q_scale * D^-1/2. Upstream's order and types (bf16): float32(bf16 w *
    q_scale), then times float32(D^-1/2) in float32; fp64: the same product in float64."""
    _check_args(args)
    _check_precision(precision)
    q_codes, q_scale = numerics.act_quant(p.q, scale_fmt)
    k_codes, k_scale = numerics.act_quant(p.k, scale_fmt)
    q_scale, k_scale = q_scale[..., 0], k_scale[..., 0]  # one block per head / per token
    D = args.index_head_dim
    if precision == "fp64":
        w = p.weights_proj * q_scale.astype(np.float64) * exact.inv_sqrt(D)
    else:
        w = (p.weights_proj.astype(np.float32) * q_scale).astype(np.float32)
        w = (w * np.float32(exact.inv_sqrt(D))).astype(np.float32)
    return Quantized(q_codes, q_scale, k_codes, k_scale, w)


def _operands(q_codes, weights, k_codes, k_scale):
    q8 = numerics.E4M3_TABLE[np.asarray(q_codes, dtype=np.uint8).astype(np.int64)]
    k8 = numerics.E4M3_TABLE[np.asarray(k_codes, dtype=np.uint8).astype(np.int64)]
    w, ks = np.asarray(weights, dtype=np.float64), np.asarray(k_scale, dtype=np.float64)
    b, s, H, D = q8.shape
    if k8.shape[0] != b or k8.shape[-1] != D or w.shape != (b, s, H) or ks.shape != k8.shape[:2]:
        raise ValueError(f"indexer operands disagree: q {q8.shape}, weights {w.shape}, k {k8.shape}, "
                         f"k_scale {ks.shape} (want q [b,s,H,D], weights [b,s,H], k [b,T,D], k_scale [b,T])")
    if np.isnan(q8).any() or np.isnan(k8).any():
        raise ValueError("indexer operands hold an e4m3 NaN code (0x7F/0xFF): act_quant never writes one")
    return q8, w, k8, ks


def logits_truth(q_codes: np.ndarray, weights: np.ndarray, k_codes: np.ndarray, k_scale: np.ndarray) -> np.ndarray:
    """float64 [b, s, T]: k_scale[t] * sum_h weights[h] * relu(q8[h] . k8[t]), unmasked.

    q_codes uint8 [b, s, H, D], weights [b, s, H] (values), k_codes uint8 [b, T, D], k_scale [b, T].
    Each dot q8 . k8 is exact in float64 in any summation order: e4m3 values are multiples of
    2^-9 below 2^9, so every partial sum of D <= 2^7 products is a multiple of 2^-18 below 2^25
    (43 bits). The head sum goes through exact.matmul (order-independent); the k_scale product is
    one rounding (none with ue8m0 scales). So the result is within an ulp or two of the real one
    and regenerates bit for bit under any BLAS."""
    q8, w, k8, ks = _operands(q_codes, weights, k_codes, k_scale)
    b, s, H, D = q8.shape
    if D > 128:
        raise ValueError(f"head width {D} > 128: the dots would no longer be exact in float64")
    qt = torch.from_numpy(np.ascontiguousarray(q8.reshape(b, s * H, D)))
    kt = torch.from_numpy(np.ascontiguousarray(k8)).transpose(1, 2)
    dots = torch.relu(torch.matmul(qt, kt)).reshape(b, s, H, -1)  # [b, s, H, T], exact
    T = dots.shape[-1]
    lhs = dots.permute(0, 1, 3, 2).reshape(b * s, T, H).contiguous()  # per row (b, s): [T, H] @ [H, 1]
    rhs = torch.from_numpy(np.ascontiguousarray(w.reshape(b * s, H, 1)))
    summed = exact.matmul(lhs, rhs).reshape(b, s, T)
    return summed.numpy() * ks[:, None, :]


def logits_deployed(q_codes: np.ndarray, weights: np.ndarray, k_codes: np.ndarray, k_scale: np.ndarray) -> np.ndarray:
    """fp8_index's arithmetic: the dots in float32 (torch's order), relu, times the float32 head
    weight, summed over heads in float32, times the float32 k_scale. Returns float64 [b, s, T] of
    float32 values (within float32 rounding of logits_truth; a kernel's order may differ as much)."""
    q8, w, k8, ks = _operands(q_codes, weights, k_codes, k_scale)
    q = torch.from_numpy(q8).float()
    k = torch.from_numpy(k8).float()
    dots = torch.relu(torch.einsum("bshd,btd->bsht", q, k))
    summed = (dots * torch.from_numpy(w).float()[..., None]).sum(dim=2)
    return (summed * torch.from_numpy(ks).float()[:, None, :]).to(torch.float64).numpy()


# ---------------------------------------------------------------- mask and selection

def causal_mask(seqlen: int, start_pos: int) -> np.ndarray | None:
    """Upstream's mask: None for a one-token step (it sees every position 0 .. start_pos, all in
    its past); for a multi-token step float64 [s, s] with -inf strictly above the diagonal (token
    i sees 0 .. i) and 0 elsewhere. Upstream builds that [s, s] mask for the whole prompt and adds
    it to logits [b, s, end_pos], which only fits when start_pos == 0 (a prefill): a multi-token
    step after cached tokens is refused here as it fails there."""
    if seqlen < 1 or start_pos < 0:
        raise ValueError(f"bad step: seqlen {seqlen}, start_pos {start_pos}")
    if seqlen == 1:
        return None
    if start_pos != 0:
        raise ValueError(f"a multi-token step requires start_pos == 0 (upstream semantics), got {start_pos}")
    return np.triu(np.full((seqlen, seqlen), -np.inf), 1)


class TopK(NamedTuple):
    """topk()'s result. indices int64 [b, s, k], k = min(index_topk, T): by descending logit, ties
    by ascending position; n_valid int64 [b, s]: how many of a row's positions are unmasked;
    boundary_tie bool [b, s]: the k-th and (k+1)-th largest finite logits are equal, so the
    selected set itself is not unique (a row's top-k set is judged only where this is False)."""
    indices: np.ndarray
    n_valid: np.ndarray
    boundary_tie: np.ndarray


def topk(logits: np.ndarray, index_topk: int, mask: np.ndarray | None = None) -> TopK:
    """The top min(index_topk, T) positions of each row of logits [b, s, T] (+ mask [s, T]).

    Upstream takes torch.topk(logits + mask, min(index_topk, end_pos)) with end_pos = T, so k
    does not shrink with a row's causal horizon: a prefill row i has only i + 1 unmasked
    positions, and when i + 1 < k the remaining k - (i + 1) entries are masked (-inf, future)
    positions. Which of them upstream returns is unspecified (torch.topk's order among equal
    values); they are harmless there because the attention adds the mask again. Here they are
    the lowest masked positions in ascending order: only indices[..., :n_valid] is meaningful."""
    lg = np.asarray(logits, dtype=np.float64)
    if lg.ndim != 3:
        raise ValueError(f"logits must be [b, s, T], got shape {lg.shape}")
    if np.isnan(lg).any():
        raise ValueError("logits hold a NaN: the top-k is undefined")
    if index_topk < 1:
        raise ValueError(f"index_topk must be >= 1, got {index_topk}")
    if mask is not None:
        lg = lg + np.asarray(mask, dtype=np.float64)[None]
    k = min(index_topk, lg.shape[-1])
    order = np.argsort(-lg, axis=-1, kind="stable")  # descending; stable: ties by ascending position
    idx = order[..., :k].astype(np.int64)
    n_valid = np.isfinite(lg).sum(axis=-1).astype(np.int64)
    srt = np.take_along_axis(lg, order, axis=-1)
    tie = np.zeros(lg.shape[:2], dtype=bool)
    if k < lg.shape[-1]:
        kth, nxt = srt[..., k - 1], srt[..., k]
        tie = np.isfinite(nxt) & (kth == nxt)
    return TopK(idx, n_valid, tie)


# ---------------------------------------------------------------- one step with the key cache

@dataclasses.dataclass
class KeyCache:
    """The indexer's FP8 key cache, as upstream keeps it: codes uint8 [b, T, D], scales float32 [b, T]."""
    codes: np.ndarray
    scales: np.ndarray

    @staticmethod
    def empty(batch: int, head_dim: int) -> "KeyCache":
        return KeyCache(np.zeros((batch, 0, head_dim), np.uint8), np.zeros((batch, 0), np.float32))


class Step(NamedTuple):
    """forward()'s result: the step's projections and quantized operands, the cache after the
    step, the logits (truth and deployed, unmasked, [b, s, end_pos]), the mask and the top-k of
    the deployed logits (what upstream selects) and of the truth."""
    projected: Projected
    quantized: Quantized
    cache: KeyCache
    logits_truth: np.ndarray
    logits_deployed: np.ndarray
    mask: np.ndarray | None
    topk: TopK
    topk_truth: TopK


def forward(args: ModelArgs, weights: dict, x: np.ndarray, qr: np.ndarray, start_pos: int, cache: KeyCache,
            rope_layout: str, scale_fmt: str, precision: str = "bf16") -> Step:
    """One indexer step as upstream's Indexer.forward: the step's keys are quantized and appended
    to `cache` (which must hold exactly start_pos positions), then every query of the step scores
    all end_pos = start_pos + s cached keys. rope_layout and scale_fmt have no default: both
    differ between deployments and change every selected index."""
    b, s = np.shape(x)[:2]
    if cache.codes.shape[1] != start_pos or cache.codes.shape[0] != b:
        raise ValueError(f"key cache holds {cache.codes.shape[:2]} (batch, positions); the step needs ({b}, {start_pos})")
    if start_pos + s > args.max_seq_len:
        raise ValueError(f"step [{start_pos}, {start_pos + s}) exceeds max_seq_len {args.max_seq_len}")
    mask = causal_mask(s, start_pos)
    p = project(args, weights, x, qr, start_pos, rope_layout, precision)
    qz = quantize(args, p, scale_fmt, precision)
    new = KeyCache(np.concatenate([cache.codes, qz.k_codes], axis=1),
                   np.concatenate([cache.scales, qz.k_scale], axis=1))
    truth = logits_truth(qz.q_codes, qz.weights, new.codes, new.scales)
    dep = logits_deployed(qz.q_codes, qz.weights, new.codes, new.scales)
    return Step(p, qz, new, truth, dep, mask, topk(dep, args.index_topk, mask), topk(truth, args.index_topk, mask))
