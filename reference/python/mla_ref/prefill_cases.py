"""Prefill and merge golden cases (fixtures/SCHEMA.md, "Prefill cases" and "Merge cases"): a
case's spec, its inputs and references (`build_prefill_case`, `build_merge_case`) and its group in
a golden file. The semantics are mla_ref.prefill and mla_ref.merge; the lists of cases are in
goldens.py.

Prefill inputs are what a deployed MHA-form prefill kernel is handed: q [total_q, h, 192],
k [total_k, h, 192], v [total_k, h, 128] as bf16 values and the two cu_seqlens. A case with few
tokens stores them; a larger one describes them (splitmix64-uniform-v1, streams Q/K/V below), so
the truth (1 KiB per query row and head) is what takes the room.

A layer-derived case (`layer_spec`) takes its q, k, v from the MLA layer itself
(prefill.mha_inputs: the layer's projections, W_UK / W_UV split, one roped k_pe for every head)
rounded to bf16, with the layer's own softmax scale, so a prefill kernel is checked on the inputs
a real layer hands it and the golden is tied to the layer the full_layer goldens come from.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import config, generator, layer, merge, numerics, prefill
from .golden_h5 import Node
from .needles import pow2_ceil

D_QK, D_V = 192, 128  # DeepSeek-V3's qk_nope + qk_rope and v_head_dim
Q_STREAM, K_STREAM, V_STREAM = 1, 2, 3
DEFAULT_SCALE = config.softmax_scale_exact(D_QK)  # 192^-1/2, correctly rounded
NEEDLE_RULE = "prefill-needles-v1"
NEEDLE_DIM = D_QK - 1  # the last rope dim carries the needles' logit
TILE = 64


class PrefillSpec:
    def __init__(self, name, description, *, heads, seqs, causal=True, scale=DEFAULT_SCALE, q_std=1.0,
                 stored=False, modify=None, needles=False, seed=None, layer=None):
        """seqs: [(s_q, s_k)] per sequence. layer: a preset name for a layer-derived case (layer_spec)."""
        self.__dict__.update(locals())
        del self.__dict__["self"]


# ---------------------------------------------------------------- needles (SCHEMA.md, prefill needles)

def needle_positions(s_q: int, s_k: int, causal: bool) -> np.ndarray:
    """Key positions of one sequence's needles (ascending): the causal diagonal of every query row
    (key s_k - s_q + i), the first and last key of every 64-key tile, the last key of the cached
    prefix (s_k - s_q - 1) and the last key."""
    if s_k <= 0:
        return np.zeros(0, np.int64)
    t = np.arange(s_k, dtype=np.int64)
    keep = (t % TILE == 0) | (t % TILE == TILE - 1)
    if causal:
        keep |= t >= s_k - s_q
    keep[s_k - 1] = True
    if 0 <= s_k - s_q - 1 < s_k:
        keep[s_k - s_q - 1] = True
    return t[keep]


def apply_needles(q, k, v, cu_q, cu_k, seqs, causal, scale):
    """Writes the needle overlay over q, k, v (float64 bf16 values, in place). Returns (positions
    [n, 2] int32 of (sequence, key position), alpha, spike)."""
    h = q.shape[1]
    pos = [(i, int(t)) for i, (s_q, s_k) in enumerate(seqs) for t in needle_positions(s_q, s_k, causal)]
    per_seq = max([sum(1 for p in pos if p[0] == i) for i in range(len(seqs))] + [1])
    if per_seq > D_V:
        raise ValueError(f"{per_seq} needles in one sequence: more than d_v = {D_V} value dims to give them")
    Q = max(float(np.abs(q).max()) if q.size else 0.0, 1.0)
    K = float(np.abs(k).max()) if k.size else 0.0
    alpha = pow2_ceil(D_QK * Q * K + 64.0 / scale)
    spike = pow2_ceil(2.0 * per_seq)
    q[:, 0::2, NEEDLE_DIM] = 1.0  # needle heads: the needles' logit is scale * alpha
    q[:, 1::2, NEEDLE_DIM] = 0.0  # background heads: every needle's logit is exactly 0
    n_of_seq = {}
    for i, t in pos:
        n = n_of_seq.get(i, 0)
        n_of_seq[i] = n + 1
        row = cu_k[i] + t
        k[row] = 0.0
        k[row, :, NEEDLE_DIM] = alpha
        v[row] = 0.0
        v[row, :, n] = spike
    return np.array(pos, dtype=np.int32).reshape(-1, 2), alpha, spike


def dominant_logit(q, k, v, cu_q, cu_k, seqs, scale):
    """Head 0 of sequence 0: one key (a third into it) gets a logit ~37 above the others for every
    query row that sees it; dim 190 carries it and is zeroed in head 0's other keys."""
    s_q, s_k = seqs[0]
    t = s_k // 3
    q[cu_q[0]:cu_q[1], 0, 190] = 1.0
    k[cu_k[0]:cu_k[1], 0, 190] = 0.0
    k[cu_k[0] + t, 0] = 0.0
    k[cu_k[0] + t, 0, 190] = pow2_ceil(40.0 / scale) / 2  # logit 512 / sqrt(192) ~ 36.9


# ---------------------------------------------------------------- layer-derived inputs (SCHEMA.md)

def layer_args(preset_name: str, heads: int) -> config.ModelArgs:
    """The preset with its first `heads` heads. The generator fills a weight in C order and wq / wq_b
    and wkv_b are head-major rows with an unchanged fan-in, so under the same seed these heads have
    the full preset's weights and the same q, k, v (wo differs, but attention stops before it)."""
    return dataclasses.replace(config.preset(preset_name), n_heads=heads)


def layer_spec(name, description, *, preset, heads, seqs, seed, causal=True):
    """A prefill case whose inputs come from the layer (layer_inputs) at the layer's softmax scale."""
    args = layer_args(preset, heads)
    if (args.qk_head_dim, args.v_head_dim) != (D_QK, D_V):
        raise ValueError(f"{name}: preset {preset!r} has d_qk {args.qk_head_dim}, d_v {args.v_head_dim}; "
                         f"the prefill contract is {D_QK}, {D_V}")
    if any(s_q > s_k for s_q, s_k in seqs):
        raise ValueError(f"{name}: a layer-derived sequence takes its queries from its own tokens, so s_q <= s_k; "
                         f"got (s_q, s_k) = {seqs}")
    return PrefillSpec(name, description, heads=heads, seqs=seqs, causal=causal, scale=args.softmax_scale,
                       stored=True, seed=seed, layer=preset)


def layer_tokens(args: config.ModelArgs, seed: int, i: int, s_k: int) -> np.ndarray:
    """Sequence i's tokens x [1, s_k, dim] (float64 values of bf16): the layer's step-i input stream, so
    sequence 0 starts with the tokens of the full_layer case of the same preset and seed."""
    return layer.x_generator(args, seed, i, 1, s_k).values()


def layer_inputs(preset_name: str, heads: int, seqs, seed: int):
    """Unrounded float64 q [total_q, h, 192], k, v of the layer: sequence i's s_k tokens at positions
    0 .. s_k - 1 through prefill.mha_inputs; its queries are the last s_q of them (a chunk over a
    cached prefix of s_k - s_q tokens)."""
    args = layer_args(preset_name, heads)
    weights = {n: g.values() for n, g in layer.weight_generators(args, seed).items()}
    qs, ks, vs = [], [], []
    for i, (s_q, s_k) in enumerate(seqs):
        q, k, v = prefill.mha_inputs(args, weights, layer_tokens(args, seed, i, s_k))
        qs.append(q[0, s_k - s_q:])
        ks.append(k[0])
        vs.append(v[0])
    return tuple(np.concatenate(a, axis=0) for a in (qs, ks, vs))


# ---------------------------------------------------------------- prefill cases

def _generated_inputs(spec: PrefillSpec, seed: int, tq: int, tk: int):
    h = spec.heads
    gens = dict(q=generator.GeneratedTensor(seed, Q_STREAM, (tq, h, D_QK), "bfloat16", 0.0, spec.q_std),
                k=generator.GeneratedTensor(seed, K_STREAM, (tk, h, D_QK), "bfloat16", 0.0, 1.0),
                v=generator.GeneratedTensor(seed, V_STREAM, (tk, h, D_V), "bfloat16", 0.0, 1.0))
    return gens, tuple(gens[n].values().copy() for n in ("q", "k", "v"))


def build_prefill_case(spec: PrefillSpec, seed: int):
    s_qs = [s for s, _ in spec.seqs]
    s_ks = [s for _, s in spec.seqs]
    cu_q = np.concatenate([[0], np.cumsum(s_qs)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(s_ks)]).astype(np.int32)
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    if spec.layer is not None:
        assert spec.stored, f"{spec.name}: a layer-derived case stores its inputs"
        gens, (q, k, v) = None, layer_inputs(spec.layer, spec.heads, spec.seqs, seed)
    else:
        gens, (q, k, v) = _generated_inputs(spec, seed, tq, tk)
    overlay = None
    if spec.modify is not None or spec.needles:
        assert spec.stored, f"{spec.name}: a modified case stores its inputs"
    if spec.modify is not None:
        spec.modify(q, k, v, cu_q, cu_k, spec.seqs, spec.scale)
    if spec.needles:
        overlay = apply_needles(q, k, v, cu_q, cu_k, spec.seqs, spec.causal, spec.scale)
    q, k, v = (numerics.round_bf16_np(a) for a in (q, k, v))
    out = dict(spec=spec, seed=seed, cu_q=cu_q, cu_k=cu_k, q=q, k=k, v=v, gens=gens, needles=overlay)
    for key, pl in (("truth", "fp64"), ("same_dtype", "bf16")):
        out[key] = prefill.prefill_attention(q, k, v, cu_q, cu_k, spec.causal, spec.scale, pl)
    return out


def write_prefill_case(root: Node, c: dict):
    spec = c["spec"]
    case = root.group(spec.name)
    case.attrs([("kind", "prefill"), ("description", spec.description), ("batch", len(spec.seqs)),
                ("heads", spec.heads), ("d_qk", D_QK), ("d_v", D_V), ("total_q", int(c["cu_q"][-1])),
                ("total_k", int(c["cu_k"][-1])), ("causal", int(spec.causal)), ("softmax_scale", float(spec.scale)),
                ("seed", c["seed"]), ("inputs_stored", int(spec.stored))])
    if spec.layer is not None:
        case.attr("layer_preset", spec.layer)
    inp = case.group("inputs")
    if spec.stored:
        for n in ("q", "k", "v"):
            inp.bf16(n, c[n])
    else:
        for n in ("q", "k", "v"):
            case.generated(n, c["gens"][n])
    inp.ds("cu_seqlens_q", c["cu_q"], "int32")
    inp.ds("cu_seqlens_k", c["cu_k"], "int32")
    if c["needles"] is not None:
        pos, alpha, spike = c["needles"]
        g = case.group("needles")
        g.attrs([("rule", NEEDLE_RULE), ("alpha", float(alpha)), ("spike", float(spike))])
        g.ds("positions", pos, "int32")
    t = case.group("truth")
    t.f64("out", c["truth"][0])
    t.f64("lse", c["truth"][1])
    sd = case.group("same_dtype")
    sd.bf16("out", c["same_dtype"][0])
    sd.ds("lse", c["same_dtype"][1].astype(np.float32), "float32")


def write_prefill_specs(root: Node, seed0: int, specs):
    for i, spec in enumerate(specs):
        write_prefill_case(root, build_prefill_case(spec, seed0 + i if spec.seed is None else spec.seed))


# ---------------------------------------------------------------- merge cases

# merge.py's names of the output dtypes -> the schema's element types
MERGE_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
OUT_A_STREAM, OUT_B_STREAM, LSE_A_STREAM, LSE_B_STREAM = 1, 2, 3, 4


class MergeSpec:
    def __init__(self, name, description, *, tokens, heads, head_dim=D_V, out_dtype="fp32", lse_std=3.0,
                 modify=None, seed=None):
        self.__dict__.update(locals())
        del self.__dict__["self"]


def round_to(values: np.ndarray, out_dtype: str) -> np.ndarray:
    """float64 -> the values of out_dtype (through float32, nearest even), as float64; NaN kept."""
    x = np.asarray(values, dtype=np.float64).astype(np.float32)
    if out_dtype == "bf16":
        return numerics.bf16_bits_to_f64(numerics.bf16_bits_from_f32(x))
    if out_dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)
    return x.astype(np.float64)


def _write_out(node: Node, name, values, out_dtype):
    if out_dtype == "bf16":
        node.bf16(name, values)
    elif out_dtype == "fp16":
        node.ds(name, np.asarray(values, dtype=np.float64).astype(np.float16).view(np.uint16), "float16")
    else:
        node.ds(name, np.asarray(values, dtype=np.float32), "float32")


def build_merge_case(spec: MergeSpec, seed: int):
    n, h, d = spec.tokens, spec.heads, spec.head_dim
    oa = generator.uniform(seed, OUT_A_STREAM, (n, h, d))
    ob = generator.uniform(seed, OUT_B_STREAM, (n, h, d))
    la = generator.uniform(seed, LSE_A_STREAM, (h, n), 0.0, spec.lse_std)
    lb = generator.uniform(seed, LSE_B_STREAM, (h, n), 0.0, spec.lse_std)
    if spec.modify is not None:
        spec.modify(oa, la, ob, lb)
    # the inputs as a kernel gets them: out in out_dtype, lse float32 (infinities kept)
    oa, ob = round_to(oa, spec.out_dtype), round_to(ob, spec.out_dtype)
    la, lb = (np.asarray(x, np.float32).astype(np.float64) for x in (la, lb))
    truth = merge.merge_states(oa, la, ob, lb, spec.out_dtype, "truth")
    deployed = merge.merge_states(oa, la, ob, lb, spec.out_dtype, "deployed")
    return dict(spec=spec, seed=seed, out_a=oa, lse_a=la, out_b=ob, lse_b=lb, truth=truth, same_dtype=deployed)


def write_merge_case(root: Node, c: dict):
    spec = c["spec"]
    case = root.group(spec.name)
    case.attrs([("kind", "merge"), ("description", spec.description), ("tokens", spec.tokens),
                ("heads", spec.heads), ("head_dim", spec.head_dim), ("out_dtype", MERGE_DTYPES[spec.out_dtype]),
                ("seed", c["seed"]), ("inputs_stored", 1)])
    inp = case.group("inputs")
    for side in ("a", "b"):
        _write_out(inp, "out_" + side, c["out_" + side], spec.out_dtype)
        inp.ds("lse_" + side, c["lse_" + side].astype(np.float32), "float32")
    t = case.group("truth")
    t.f64("out", c["truth"][0])
    t.f64("lse", c["truth"][1])
    sd = case.group("same_dtype")
    _write_out(sd, "out", c["same_dtype"][0], spec.out_dtype)
    sd.ds("lse", c["same_dtype"][1].astype(np.float32), "float32")


def write_merge_specs(root: Node, seed0: int, specs):
    for i, spec in enumerate(specs):
        write_merge_case(root, build_merge_case(spec, seed0 + i if spec.seed is None else spec.seed))


# Rows of the empty-side patterns: token j of every head gets EMPTY_ROWS[j % len] as (lse_a, lse_b)
# (None: the generated finite value). An empty side's out holds NaN where its lse is +inf, the
# garbage a kernel may leave behind in a row it did not attend.
EMPTY_ROWS = ((math.inf, None), (-math.inf, None), (None, math.inf), (None, -math.inf),
              (math.inf, math.inf), (-math.inf, -math.inf), (math.inf, -math.inf), (None, None))


def empty_rows(oa, la, ob, lb):
    for j in range(la.shape[1]):
        a, b = EMPTY_ROWS[j % len(EMPTY_ROWS)]
        for lse, out, val in ((la, oa, a), (lb, ob, b)):
            if val is not None:
                lse[:, j] = val
                if val > 0:
                    out[j] = math.nan


def side_empty(side: str, value: float):
    def modify(oa, la, ob, lb):
        (la if side == "a" else lb)[:] = value
    return modify


def lse_apart(oa, la, ob, lb):
    """lse_b = lse_a +- 1000 alternating by token, around a large lse_a (exp of either overflows)."""
    la[:] = la * 10 + 500.0
    sign = np.where(np.arange(la.shape[1]) % 2 == 0, 1.0, -1.0)
    lb[:] = la + 1000.0 * sign[None, :]
