"""Attention-core golden cases (fixtures/SCHEMA.md, "Attention-core cases"): a case's spec
(`AttnSpec`), its inputs and references computed from the spec and a seed (`build_attn_case`),
and its group in a golden file (`write_attn_case`). The families' lists of specs are in goldens.py.
"""
from __future__ import annotations

import numpy as np

from . import attention, config, generator, needles, numerics
from .golden_h5 import Node


# generator streams of attention-core inputs
Q_STREAM, CACHE_STREAM, PERM_STREAM, INDEX_STREAM_BASE = 1, 2, 3, 100
DEFAULT_SCALE = config.softmax_scale_exact(attention.D_QK)  # 576^-1/2, correctly rounded


# ================================================================ attention-core cases

class AttnSpec:
    def __init__(self, name, description, *, heads, s_q, lengths, page_size, scale=DEFAULT_SCALE,
                 cache_format="bf16", scale_fmt=None, fp8_recipe=numerics.DEFAULT_FP8_RECIPE, topk=0, q_std=1.0,
                 extra_blocks=1, extra_bt=1, permute=True, generated=False, modify=None, indices=None,
                 fp8_specials=False, fp8_tiny=False, needles=False, seed=None):
        self.__dict__.update(locals())
        del self.__dict__["self"]


def _fp8_specials(lat: np.ndarray, pos: int) -> None:
    """Overwrites some 128-value blocks of one token's latent (float64 bf16 values, in place) with
    the FP8 edge cases; which ones depends on the token's logical position."""
    v = pos % 3
    if v == 0:
        lat[0], lat[1] = 1.75, -1.75  # amax 1.75: scale 1.75/448 = 2^-8 exactly; codes 0x7E / 0xFE
        lat[128:256] = np.clip(lat[128:256], -1.0, 1.0)
        lat[128] = 1.75  # block 1: amax 1.75 (scale 2^-8) with subnormal codes 1..7 and ties
        lat[129:136] = np.arange(1, 8) * 2.0 ** -17  # codes 0x01..0x07
        lat[136], lat[137] = 2.0 ** -18, 3 * 2.0 ** -18  # ties: -> 0x00 and 0x02 (even)
        lat[138], lat[139] = -2.0 ** -14, -(2.0 ** -19)  # 0x88 (smallest normal, negative); -> 0x80 (-0)
        lat[256:384] *= 5e-5  # block 2: amax < 1e-4 -> scale 1e-4/448
        lat[384:512] *= 4.0  # block 3: a large scale
    elif v == 1:
        lat[0:128] *= 1e-3  # tiny scale
        lat[128:256] = 0.0  # all-zero block: amax 0 -> scale 1e-4/448, all codes 0
        lat[256:384] *= 3.0
        lat[300] = 40.0  # one outlier: the rest of its block loses precision (small codes, subnormals)
    else:
        lat[0:128] *= 6.0  # large scale, logits stay moderate


# Block maxima of the tiny-amax FP8 blocks: all zero, below the 1e-4 clamp, then both sides of
# the two places where the recipes part: 448·2^-14 = 0.02734375 (ue8m0 scales) and 448·1e-4 ~
# 0.0448 (float32 scales), each a bf16 value; and one ordinary block. numerics.fp8_recipes_differ
# says which of them the recipes encode differently.
TINY_AMAX = (0.0, 5.0e-05, 0.009765625, 0.0272216796875, 0.02734375, 0.0274658203125, 0.044677734375,
             0.044921875, 0.25)


def _fp8_tiny_blocks(lat: np.ndarray, pos: int) -> None:
    """Gives the four 128-value blocks of one token's latent (bf16 values, in place) block maxima
    from TINY_AMAX, cycling with the token's position so every value meets every block index."""
    for blk in range(4):
        amax = numerics.round_bf16_np(np.array([TINY_AMAX[(4 * pos + blk) % len(TINY_AMAX)]]))[0]
        x = lat[128 * blk:128 * (blk + 1)]
        m = np.abs(x).max()
        if amax == 0 or m == 0:
            y = np.zeros_like(x)  # +0 everywhere (np.clip's choice between -0 and +0 varies by numpy)
        else:
            y = numerics.round_bf16_np(x * (amax / m))
            y = np.where(y > amax, amax, np.where(y < -amax, -amax, y))
        y[int(np.argmax(np.abs(x)))] = amax  # the block maximum, exactly
        lat[128 * blk:128 * (blk + 1)] = y


def build_attn_case(spec: AttnSpec, seed: int):
    """Returns a dict with everything to write (see write_attn_case)."""
    b, s_q, h, ps = len(spec.lengths), spec.s_q, spec.heads, spec.page_size
    lengths = np.array(spec.lengths, dtype=np.int32)
    need = attention.pages_needed(lengths, ps)
    nb = sum(need) + spec.extra_blocks
    perm = generator.permutation(seed, PERM_STREAM, nb) if spec.permute else np.arange(nb)
    mb = max(need + [0]) + spec.extra_bt
    bt, used = attention.make_block_table(lengths, ps, perm, mb)
    q_gen = generator.GeneratedTensor(seed, Q_STREAM, (b, s_q, h, attention.D_QK), "bfloat16", 0.0, spec.q_std)
    c_gen = generator.GeneratedTensor(seed, CACHE_STREAM, (nb, ps, attention.D_QK), "bfloat16", 0.0, 1.0)
    q_bits, c_bits = q_gen.data(), c_gen.data()
    q = numerics.bf16_bits_to_f64(q_bits)
    cache = numerics.bf16_bits_to_f64(c_bits)
    if spec.modify is not None:
        assert not spec.generated
        spec.modify(q, cache, bt, lengths)
        q = numerics.round_bf16_np(q)
        cache = numerics.round_bf16_np(cache)
    if spec.fp8_specials:
        for i, L in enumerate(lengths):
            for t in sorted({0, 1, 2, int(L) - 1, int(L) // 2}):
                if 0 <= t < L:
                    blk, off = bt[i, t // ps], t % ps
                    _fp8_specials(cache[blk, off, :attention.D_V], t)
        cache = numerics.round_bf16_np(cache)
    if spec.fp8_tiny:
        for i, L in enumerate(lengths):
            for t in range(0, int(L), 2):
                _fp8_tiny_blocks(cache[bt[i, t // ps], t % ps, :attention.D_V], t)
    overlay = None
    if spec.needles:
        overlay = needles.Overlay(lengths, ps, h, spec.scale, float(np.abs(q).max()),
                                  float(np.abs(cache[used]).max()))
        overlay.apply(q, cache, bt)
    cache[~used] = np.nan
    indices = spec.indices(seed, lengths, s_q) if spec.indices is not None else None
    out = dict(spec=spec, seed=seed, lengths=lengths, nb=nb, mb=mb, bt=bt, q=q, q_gen=q_gen, c_gen=c_gen,
               indices=indices, needles=overlay)
    if spec.cache_format == "bf16":
        out["kv_cache"] = c_bits if spec.generated else numerics.bf16_bits_from_f64(cache)
        truth_cache = cache
    else:
        byt = numerics.fp8_quantize(np.where(used[..., None], cache, 0.0)[..., :attention.D_V],
                                    np.where(used[..., None], cache, 0.0)[..., attention.D_V:], spec.scale_fmt,
                                    spec.fp8_recipe)
        byt[~used] = numerics.fp8_poison_token()
        out["kv_cache"] = byt
        # The bf16 cache these bytes encode (unused slots NaN, like a bf16 cache): FP8 encoding of
        # a bf16 token is deterministic where the RMSNorm before it is not, so an append kernel
        # fed these tokens must reproduce kv_cache byte for byte.
        out["kv_cache_bf16"] = numerics.bf16_bits_from_f64(cache)
        truth_cache = numerics.fp8_dequantize(byt)
        out["kv_cache_dequant"] = truth_cache
        out["unquantized"] = attention.attention(q, cache, bt, lengths, spec.scale, True, indices, "truth")
    out["truth"] = attention.attention(q, truth_cache, bt, lengths, spec.scale, True, indices, "truth")
    # fp8: the dequantized values rounded to bf16 (a bf16 cache already holds bf16 values)
    same_cache = truth_cache if spec.cache_format == "bf16" else numerics.round_bf16_np(truth_cache)
    out["same_dtype"] = attention.attention(q, same_cache, bt, lengths, spec.scale, True, indices, "same_dtype")
    return out


def write_attn_case(root: Node, c: dict):
    spec = c["spec"]
    b = len(c["lengths"])
    case = root.group(spec.name)
    attrs = [("kind", "attn_core"), ("description", spec.description), ("batch", b), ("s_q", spec.s_q),
             ("heads", spec.heads), ("d_qk", attention.D_QK), ("d_v", attention.D_V), ("page_size", spec.page_size),
             ("num_blocks", c["nb"]), ("max_blocks", c["mb"]), ("cache_format", spec.cache_format)]
    if spec.cache_format == "fp8":
        attrs += [("scale_fmt", spec.scale_fmt), ("fp8_recipe", spec.fp8_recipe)]
    attrs += [("topk", spec.topk), ("softmax_scale", float(spec.scale)), ("causal", 0 if spec.topk else 1),
              ("sentinel_block_id", attention.SENTINEL_BLOCK_ID), ("seed", c["seed"]),
              ("inputs_stored", 0 if spec.generated else 1)]
    case.attrs(attrs)
    inp = case.group("inputs")
    if spec.generated:
        case.generated("q", c["q_gen"])
        case.generated("kv_cache", c["c_gen"])
    else:
        inp.bf16("q", c["q"])
        if spec.cache_format == "bf16":
            inp.ds("kv_cache", c["kv_cache"], "bfloat16")
        else:
            inp.ds("kv_cache", c["kv_cache"], "fp8_kv_v32")
            inp.f64("kv_cache_dequant", c["kv_cache_dequant"])
            inp.ds("kv_cache_bf16", c["kv_cache_bf16"], "bfloat16")
    inp.ds("block_table", c["bt"], "int32")
    inp.ds("cache_seqlens", c["lengths"], "int32")
    if spec.topk:
        inp.ds("indices", c["indices"], "int32")
    if c["needles"] is not None:
        c["needles"].write(case)
    t = case.group("truth")
    t.f64("out", c["truth"][0])
    t.f64("lse", c["truth"][1])
    sd = case.group("same_dtype")
    sd.bf16("out", c["same_dtype"][0])
    sd.ds("lse", c["same_dtype"][1].astype(np.float32), "float32")
    if "unquantized" in c:
        u = case.group("unquantized")
        u.f64("out", c["unquantized"][0])
        u.f64("lse", c["unquantized"][1])


def write_attn_specs(root: Node, seed0: int, specs):
    for i, spec in enumerate(specs):
        write_attn_case(root, build_attn_case(spec, seed0 + i if spec.seed is None else spec.seed))


# ---------------------------------------------------------------- sparse indices

INVALID_VALUES = (-1, -2, -7, -2147483648)


def make_indices(n_valid_fn, all_invalid_rows=()):
    """Index builder: row (i, j) gets n_valid_fn(L, topk) distinct valid logical positions from a
    generator permutation, and invalid entries cycling through -1, other negatives, L, L+5 and
    2147483647, placed at generator-permuted slots. Rows in `all_invalid_rows` are all invalid."""
    def build(seed, lengths, s_q, topk):
        b = len(lengths)
        idx = np.zeros((b, s_q, topk), dtype=np.int64)
        for i, L in enumerate(lengths):
            L = int(L)
            for j in range(s_q):
                row_stream = INDEX_STREAM_BASE + 2 * (i * s_q + j)
                nv = 0 if (i, j) in all_invalid_rows else min(n_valid_fn(L, topk), L, topk)
                valid = generator.permutation(seed, row_stream, L)[:nv] if L else np.zeros(0, np.int64)
                invalid_pool = list(INVALID_VALUES) + [L, L + 5, 2147483647]
                row = np.array(list(valid) + [invalid_pool[k % len(invalid_pool)] for k in range(topk - nv)],
                               dtype=np.int64)
                slots = generator.permutation(seed, row_stream + 1, topk)
                idx[i, j, slots] = row
        return idx.astype(np.int32)
    return build
