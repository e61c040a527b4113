"""Writes and checks the golden catalog (fixtures/SCHEMA.md).

    PYTHONPATH=reference/python /usr/bin/python3 -m mla_ref.goldens write --out fixtures/goldens
    PYTHONPATH=reference/python /usr/bin/python3 -m mla_ref.goldens check --dir fixtures/goldens

`write` is deterministic: with the same torch/numpy/h5py/zlib it reproduces every file byte for
byte (datasets without timestamps, attributes and objects in a fixed order, no ambient state).
`check` regenerates into a temporary folder and compares dataset by dataset (see `compare_files`).
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import platform
import shutil
import sys
import tempfile
import time

import h5py
import numpy as np
import torch

from . import __version__, attention, catalog, config, generator, layer, needles, numerics, rope, tolerances

SCHEMA_VERSION = 2
CANONICAL_COMMAND = "python3 -m mla_ref.goldens write --out fixtures/goldens"
# The families and their seeds are the catalog description's (fixtures/catalog.json).
FAMILIES = catalog.NAMES
FAMILY_SEEDS = {f.name: f.seed for f in catalog.FAMILIES}
# generator streams of attention-core inputs
Q_STREAM, CACHE_STREAM, PERM_STREAM, INDEX_STREAM_BASE = 1, 2, 3, 100
STORAGE = {"float64": "<f8", "float32": "<f4", "bfloat16": "<u2", "int32": "<i4", "fp8_kv_v32": "u1", "uint8": "u1"}
COMPRESS_MIN_ELEMENTS = 4096
V3_SCALE = config.preset("v3").softmax_scale
DEFAULT_SCALE = config.softmax_scale_exact(attention.D_QK)  # 576^-1/2, correctly rounded


# ================================================================ deterministic HDF5 writing

class Node:
    """A thin wrapper over an h5py group that writes attributes and datasets deterministically."""

    def __init__(self, g):
        self.g = g

    def attr(self, k, v):
        if isinstance(v, str):
            self.g.attrs.create(k, v, dtype=h5py.string_dtype("utf-8"))
        elif isinstance(v, (bool, np.bool_)):
            self.g.attrs.create(k, np.int64(int(v)))
        elif isinstance(v, (int, np.integer)):
            self.g.attrs.create(k, np.int64(v))
        elif isinstance(v, (float, np.floating)):
            self.g.attrs.create(k, np.float64(v))
        elif isinstance(v, np.ndarray):
            self.g.attrs.create(k, v)
        else:
            raise TypeError(f"attribute {k}: {type(v)}")

    def attrs(self, items):
        for k, v in items:
            self.attr(k, v)

    def group(self, name) -> "Node":
        return Node(self.g.require_group(name))

    def ds(self, name, arr, dtype_attr, attrs=()):
        arr = np.ascontiguousarray(arr)
        storage = STORAGE[dtype_attr]
        if dtype_attr == "bfloat16":
            assert arr.dtype == np.uint16, f"{name}: bf16 datasets are written from uint16 bits"
        data = arr.astype(storage)
        kw = {}
        if data.size >= COMPRESS_MIN_ELEMENTS:
            kw = dict(compression="gzip", compression_opts=4, shuffle=True)
        d = self.g.create_dataset(name, data=data, track_times=False, **kw)
        dn = Node(d)
        dn.attr("dtype", dtype_attr)
        dn.attrs(attrs)
        return d

    def f64(self, name, arr, attrs=()):
        return self.ds(name, np.asarray(arr, dtype=np.float64), "float64", attrs)

    def bf16(self, name, values, attrs=()):
        """float64 values (rounded to bf16 by the schema rule) or uint16 bits."""
        a = np.asarray(values)
        bits = a if a.dtype == np.uint16 else numerics.bf16_bits_from_f64(a)
        return self.ds(name, bits, "bfloat16", attrs)

    def generated(self, name, gt: generator.GeneratedTensor):
        self.group("generated").group(name).attrs(gt.attrs())


def root_attrs(family: str, command: str):
    return [
        ("schema_version", SCHEMA_VERSION),
        ("family", family),
        ("generator_version", __version__),
        ("torch_version", str(torch.__version__)),
        ("numpy_version", np.__version__),
        ("h5py_version", h5py.__version__),
        ("python_version", platform.python_version()),
        ("command", command),
        ("seed", FAMILY_SEEDS[family]),
    ]


PROVENANCE_ATTRS = ("generator_version", "torch_version", "numpy_version", "h5py_version", "python_version", "command")

# How each family of the catalog description is written: family name -> writer(cases_node, seed0).
# A layer family registers its writer; an attention family registers the function returning its
# case specs (written by write_attn_specs). Every described family needs one, and only those.
WRITERS = {}


def family_writer(name):
    def register(fn):
        catalog.family(name)  # KeyError for a family fixtures/catalog.json does not describe
        WRITERS[name] = fn
        return fn
    return register


def attention_family(name):
    def register(specs_fn):
        family_writer(name)(lambda root, seed0: write_attn_specs(root, seed0, specs_fn()))
        return specs_fn
    return register


# ================================================================ full layer

def _pipeline_ds(node: Node, name, values, pipeline):
    if pipeline == "fp64":
        node.f64(name, values)
    elif pipeline == "fp32":
        node.ds(name, np.asarray(values, dtype=np.float32), "float32")
    else:
        node.bf16(name, values)


def layer_case_attrs(kind, description, preset_name, args, batch, n_steps, seed, inputs_stored):
    return ([("kind", kind), ("description", description), ("preset", preset_name)] + args.attrs() +
            [("batch", batch), ("softmax_scale", args.softmax_scale), ("yarn", int(args.yarn)),
             ("n_steps", n_steps), ("seed", seed), ("inputs_stored", int(inputs_stored))])


def write_weights(case: Node, args, wgen, inputs_stored):
    for name in layer.weight_names(args):
        if inputs_stored:
            case.group("weights").bf16(name, wgen[name].data())
        else:
            case.generated("weights_" + name, wgen[name])
    case.group("rope").f64("inv_freq", rope.inv_freq(args))


def full_layer_case(root: Node, name, description, preset_name, seed, batch, prefill, n_decode, inputs_stored):
    args = config.preset(preset_name)
    wgen = layer.weight_generators(args, seed)
    weights = {k: g.values() for k, g in wgen.items()}
    steps, pos = [], 0
    for k in range(1 + n_decode):
        s = prefill if k == 0 else 1
        steps.append((layer.x_generator(args, seed, k, batch, s).data(), pos))
        pos += s
    outputs, inter, caches = layer.run_steps(
        args, weights, [(numerics.bf16_bits_to_f64(x), p) for x, p in steps])
    case = root.group(name)
    case.attrs(layer_case_attrs("full_layer", description, preset_name, args, batch, len(steps), seed, inputs_stored))
    write_weights(case, args, wgen, inputs_stored)
    for k, (x, p) in enumerate(steps):
        st = case.group("steps").group(str(k))
        st.bf16("x", x, attrs=[("start_pos", p)])
        for pl in layer.PIPELINES:
            for f in layer.FORMS:
                _pipeline_ds(st.group(pl).group(f), "out", outputs[(k, pl, f)], pl)
        for f in layer.FORMS:
            g = st.group("fp64").group(f)
            for iname in ("q_nope", "q_pe", "kv_normed", "k_pe", "scores", "probs", "q_absorbed", "latent_out", "attn_out"):
                if iname in inter[(k, f)]:
                    g.f64(iname, inter[(k, f)][iname])
    for f in layer.FORMS:
        for cname, c in caches[("fp64", f)].items():
            case.group("final_cache").group("fp64").group(f).f64(cname, c)


@family_writer("full_layer")
def write_full_layer(root: Node, seed0: int):
    cases = [
        ("tiny_qlora_yarn", "tiny preset, q-LoRA on, YaRN on: prefill 5 then 4 decode steps, batch 2", "tiny", 2, 5, 4, 1),
        ("tiny_noqlora_yarn", "tiny preset, single wq (q-LoRA off), YaRN on", "tiny-noqlora", 2, 5, 4, 1),
        ("tiny_qlora_noyarn", "tiny preset, q-LoRA on, YaRN off (max_seq_len == original_seq_len)", "tiny-noyarn", 2, 5, 4, 1),
        ("tiny_noqlora_noyarn", "tiny preset, q-LoRA off, YaRN off", "tiny-noqlora-noyarn", 2, 5, 4, 1),
        ("v2_lite", "DeepSeek-V2-Lite shape (no q-LoRA, mscale 0.707), generated weights: prefill 3 then 4 decodes",
         "v2-lite", 1, 3, 4, 0),
        ("v3_tp8", "DeepSeek-V3 shape, one TP8 shard (16 heads), generated weights: prefill 3 then 4 decodes",
         "v3-tp8", 1, 3, 4, 0),
    ]
    for i, (name, desc, pr, b, pre, nd, stored) in enumerate(cases):
        full_layer_case(root, name, desc, pr, seed0 + i, b, pre, nd, stored)


@family_writer("cache_boundary")
def write_cache_boundary(root: Node, seed0: int):
    preset_name, seed, batch = "tiny", seed0, 1
    args = config.preset(preset_name)
    M = args.max_seq_len
    wgen = layer.weight_generators(args, seed)
    weights = {k: g.values() for k, g in wgen.items()}
    x0 = layer.x_generator(args, seed, 0, batch, M - 1).data()
    xa = layer.x_generator(args, seed, 1, batch, 1).data()
    xr = layer.x_generator(args, seed, 2, batch, 1).data()
    outs = {}
    for pl in layer.PIPELINES:
        for f in layer.FORMS:
            m = layer.MLA(args, weights, pl, f, batch)
            outs[("0", pl, f)] = m.forward(numerics.bf16_bits_to_f64(x0), 0).to(torch.float64).numpy()
            outs[("accept", pl, f)] = m.forward(numerics.bf16_bits_to_f64(xa), M - 1).to(torch.float64).numpy()
            try:
                m.forward(numerics.bf16_bits_to_f64(xr), M)
            except layer.CacheCapacityError:
                pass
            else:
                raise AssertionError("the reference accepted a write at max_seq_len")
    case = root.group("tiny_boundary")
    case.attrs(layer_case_attrs("cache_boundary",
                                f"tiny preset (max_seq_len {M}): prefill {M - 1}, accept a decode at {M - 1}, reject one at {M}",
                                preset_name, args, batch, 1, seed, 1))
    case.attr("expected_error", layer.CAPACITY_ERROR)
    write_weights(case, args, wgen, True)
    for key, x, p in (("0", x0, 0), ("accept", xa, M - 1)):
        st = case.group("steps").group("0") if key == "0" else case.group("accept")
        st.bf16("x", x, attrs=[("start_pos", p)])
        for pl in layer.PIPELINES:
            for f in layer.FORMS:
                _pipeline_ds(st.group(pl).group(f), "out", outs[(key, pl, f)], pl)
    rj = case.group("reject")
    rj.bf16("x", xr, attrs=[("start_pos", M)])
    rj.attr("expected_error", layer.CAPACITY_ERROR)


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


@attention_family("attn_core")
def attn_core_specs():
    S = AttnSpec
    return [
        S("h1_sq1_single_page", "1 head, one full page of 64 tokens", heads=1, s_q=1, lengths=[64], page_size=64),
        S("h3_sq2_short", "3 heads, s_q 2, a length-1 sequence (its first query row is empty) and 65 (page 16)",
          heads=3, s_q=2, lengths=[1, 65], page_size=16),
        S("h16_varlen_ps64", "varlen batch [0,1,63,64,65,100,129,200] at page size 64, 16 heads",
          heads=16, s_q=1, lengths=[0, 1, 63, 64, 65, 100, 129, 200], page_size=64, extra_blocks=2),
        S("h16_varlen_ps16", "varlen batch [0,1,63,64,65,100,129,200] at page size 16, 16 heads",
          heads=16, s_q=1, lengths=[0, 1, 63, 64, 65, 100, 129, 200], page_size=16, extra_blocks=3),
        S("h63_sq1_ps16", "63 heads (not a multiple of any tile), lengths 65 and 127 at page size 16",
          heads=63, s_q=1, lengths=[65, 127], page_size=16),
        S("h3_sq4_short", "s_q 4 with a length-3 sequence (first query row empty) and one of 70, page 16",
          heads=3, s_q=4, lengths=[3, 70], page_size=16),
        S("h64_sq2_ps64", "64 heads, s_q 2: lengths 1 (one empty causal row) and 130, page 64",
          heads=64, s_q=2, lengths=[1, 130], page_size=64),
        S("h128_v3_scale", "128 heads with the V3 softmax scale, lengths 64 and 257, page 64",
          heads=128, s_q=1, lengths=[64, 257], page_size=64, scale=V3_SCALE),
        S("h128_sq2_v3_scale_ps16", "128 heads, s_q 2, V3 softmax scale, length 33 at page 16",
          heads=128, s_q=2, lengths=[33], page_size=16, scale=V3_SCALE),
        S("all_empty", "every sequence empty: out 0, lse +inf everywhere", heads=16, s_q=1, lengths=[0, 0],
          page_size=64),
    ]


@attention_family("attn_fp8")
def attn_fp8_specs():
    S = AttnSpec
    return [
        S("fp8_fp32scale_h16", "FP8 cache, float32 scales, edge blocks (+-448*scale, subnormals, amax<1e-4, zero, large, tiny)",
          heads=16, s_q=1, lengths=[1, 65, 130], page_size=64, cache_format="fp8", scale_fmt="fp32", fp8_specials=True),
        S("fp8_ue8m0_h64_sq2", "FP8 cache, ue8m0 (power-of-two) scales, s_q 2, page 16, edge blocks",
          heads=64, s_q=2, lengths=[100], page_size=16, cache_format="fp8", scale_fmt="ue8m0", fp8_specials=True),
        S("fp8_fp32scale_varlen_v3", "FP8 float32 scales, varlen [0, 1, 63, 64, 65] at page 16, V3 scale",
          heads=16, s_q=1, lengths=[0, 1, 63, 64, 65], page_size=16, cache_format="fp8", scale_fmt="fp32",
          fp8_specials=True, scale=V3_SCALE, extra_blocks=2),
        S("fp8_ue8m0_h128", "FP8 ue8m0 scales, 128 heads, length 150, page 64",
          heads=128, s_q=1, lengths=[150], page_size=64, cache_format="fp8", scale_fmt="ue8m0", fp8_specials=True),
    ] + [
        # One bf16 cache (one seed) quantized by each recipe in each scale format: blocks with amax
        # below the crossovers (zero, < 1e-4, both sides of 448·2^-14 and of 448·1e-4) on every
        # other token, so the four byte images differ exactly where the recipes do.
        S(f"fp8_tiny_{recipe}_{fmt}",
          f"FP8 tiny-amax blocks (0 ... 0.0449) quantized with the {recipe} recipe, {fmt} scales; "
          "same bf16 cache as the other fp8_tiny cases",
          heads=8, s_q=1, lengths=[1, 64, 65], page_size=64, cache_format="fp8", scale_fmt=fmt,
          fp8_recipe=recipe, fp8_tiny=True, seed=FAMILY_SEEDS["attn_fp8"] + 100)
        for recipe in numerics.FP8_RECIPES for fmt in numerics.SCALE_FMTS
    ]


# ---------------------------------------------------------------- sparse

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


@attention_family("attn_sparse")
def attn_sparse_specs():
    S = AttnSpec

    def sp(name, desc, topk, n_valid_fn, all_invalid=(), **kw):
        builder = make_indices(n_valid_fn, all_invalid)
        return S(name, desc, topk=topk, indices=lambda seed, lengths, s_q: builder(seed, lengths, s_q, topk), **kw)

    return [
        sp("sparse_bf16_topk16", "sparse top-16, s_q 2: invalid -1/-2/-7/INT_MIN/L/L+5/INT_MAX mixed in, one all-invalid row",
           16, lambda L, k: k - 5, all_invalid={(1, 1)}, heads=16, s_q=2, lengths=[100, 37], page_size=64),
        sp("sparse_bf16_topk1", "sparse top-1, s_q 1, 3 sequences (one of length 0)",
           1, lambda L, k: 1, heads=64, s_q=1, lengths=[5, 0, 64], page_size=64),
        sp("sparse_bf16_topk64_ps16", "sparse top-64 at page size 16, half the entries invalid, V3 scale",
           64, lambda L, k: 32, heads=128, s_q=1, lengths=[300], page_size=16, scale=V3_SCALE),
        sp("sparse_bf16_topk2048", "sparse top-2048 (the V3.2 indexer's k), s_q 2, 2040 valid per row, generated q/cache",
           2048, lambda L, k: 2040, heads=64, s_q=2, lengths=[2112], page_size=64, generated=True, extra_blocks=0),
        sp("sparse_bf16_topk2560", "sparse top-2560 (beyond 2048), s_q 1, 2500 valid, generated q/cache",
           2560, lambda L, k: 2500, heads=16, s_q=1, lengths=[2624], page_size=64, generated=True, extra_blocks=0),
        sp("sparse_fp8_topk32", "sparse top-32 over an FP8 cache (float32 scales), s_q 2, an all-invalid row",
           32, lambda L, k: 20, all_invalid={(0, 1)}, heads=16, s_q=2, lengths=[90, 200], page_size=64,
           cache_format="fp8", scale_fmt="fp32", fp8_specials=True),
        sp("sparse_fp8_topk2048", "sparse top-2048 over an FP8 cache (ue8m0 scales), s_q 1, 2000 valid",
           2048, lambda L, k: 2000, heads=64, s_q=1, lengths=[2048], page_size=64,
           cache_format="fp8", scale_fmt="ue8m0", fp8_specials=True),
    ] + [
        # FlashMLA's sparse shape (h 64, topk % 64 == 0, page 64) over one bf16 cache with
        # tiny-amax blocks, quantized by each recipe in each scale format.
        sp(f"sparse_fp8_tiny_{recipe}_{fmt}",
           f"sparse top-64 over FP8 tiny-amax blocks quantized with the {recipe} recipe, {fmt} scales; "
           "same bf16 cache as the other sparse_fp8_tiny cases",
           64, lambda L, k: 48, all_invalid={(1, 0)}, heads=64, s_q=1, lengths=[100, 40], page_size=64,
           cache_format="fp8", scale_fmt=fmt, fp8_recipe=recipe, fp8_tiny=True,
           seed=FAMILY_SEEDS["attn_sparse"] + 100)
        for recipe in numerics.FP8_RECIPES for fmt in numerics.SCALE_FMTS
    ]


# ---------------------------------------------------------------- stress

def _dominant(q, cache, bt, lengths):
    """Head 0's key at one position gets a logit ~40 above the rest (the others stay random)."""
    L = int(lengths[0])
    t = L // 3
    ps = cache.shape[1]
    blk, off = bt[0, t // ps], t % ps
    q0 = q[0, 0, 0]
    cache[blk, off] = q0 / np.dot(q0, q0) * (40.0 / DEFAULT_SCALE)


def _equal(q, cache, bt, lengths):
    """All logits equal: q is nonzero only on latent dims 0..255, where every key is the same
    vector; dims 256..511 (part of V) vary, so the output is the mean of V, not a copy of it."""
    q[..., 256:] = 0.0
    common = cache[bt[0, 0], 0, :256].copy()
    for i, L in enumerate(lengths):
        for t in range(int(L)):
            cache[bt[i, t // cache.shape[1]], t % cache.shape[1], :256] = common


@attention_family("attn_stress")
def attn_stress_specs():
    S = AttnSpec
    return [
        S("q_std100", "q with std 100 (logits ~ +-100s): the split-KV LSE overflow bug, lengths 1024 and 333",
          heads=64, s_q=1, lengths=[1024, 333], page_size=64, q_std=100.0),
        S("q_std100_sq2_ps16", "q std 100, s_q 2, page 16, 16 heads", heads=16, s_q=2, lengths=[517], page_size=16,
          q_std=100.0),
        S("dominant_logit", "head 0 has one logit ~40 above all others (probability ~1 in fp32)",
          heads=16, s_q=1, lengths=[300], page_size=64, modify=_dominant),
        S("equal_logits", "all logits equal: output = mean of V over the attended tokens",
          heads=8, s_q=2, lengths=[200, 77], page_size=64, modify=_equal),
        # Long contexts (generated q/cache) with needles (SCHEMA.md, "Needles"), permuted pages and
        # poisoned spare blocks: a kernel that drops, duplicates or misreads a first/last/boundary
        # token, reads one past the end or ignores the block table is far outside tolerance.
        S("long_32k", "32768 + 16421 tokens, 128 heads, V3 scale: needles, permuted pages, 3 poisoned spare blocks",
          heads=128, s_q=1, lengths=[32768, 16421], page_size=64, generated=True, extra_blocks=3, scale=V3_SCALE,
          needles=True),
        S("long_65537", "65537 + 1025 + 64 tokens, 64 heads: needles, last pages of one token, permuted pages, "
          "4 poisoned spare blocks", heads=64, s_q=1, lengths=[65537, 1025, 64], page_size=64, generated=True,
          extra_blocks=4, needles=True),
        S("long_128k", "131072 tokens, 128 heads, V3 scale: needles, permuted pages, 2 poisoned spare blocks",
          heads=128, s_q=1, lengths=[131072], page_size=64, generated=True, extra_blocks=2, scale=V3_SCALE,
          needles=True),
    ]


# ================================================================ files

def _check_writers():
    missing = [f for f in FAMILIES if f not in WRITERS]
    if missing:
        raise RuntimeError(f"fixtures/catalog.json describes families no writer writes: {missing}")


def write_family(family: str, path: str, command: str):
    _check_writers()
    seed0 = FAMILY_SEEDS[family]
    with h5py.File(path, "w") as f:
        root = Node(f)
        root.attrs(root_attrs(family, command))
        WRITERS[family](root.group("cases"), seed0)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(out_dir):
    known = {f + ".h5" for f in FAMILIES}
    names = sorted(n for n in os.listdir(out_dir) if n in known)
    with open(os.path.join(out_dir, "MANIFEST.sha256"), "w") as f:
        for n in names:
            f.write(f"{sha256_file(os.path.join(out_dir, n))}  {n}\n")


def write_all(out_dir, command=CANONICAL_COMMAND, families=FAMILIES, verbose=True):
    os.makedirs(out_dir, exist_ok=True)
    t_all = time.time()
    for fam in families:
        t0 = time.time()
        path = os.path.join(out_dir, fam + ".h5")
        tmp = path + ".tmp"
        write_family(fam, tmp, command)
        os.replace(tmp, path)
        if verbose:
            print(f"{fam + '.h5':22s} {os.path.getsize(path) / 2**20:8.2f} MiB  {time.time() - t0:6.1f} s", flush=True)
    write_manifest(out_dir)
    if verbose:
        total = sum(os.path.getsize(os.path.join(out_dir, f + ".h5")) for f in FAMILIES
                    if os.path.exists(os.path.join(out_dir, f + ".h5")))
        print(f"{'total':22s} {total / 2**20:8.2f} MiB  {time.time() - t_all:6.1f} s", flush=True)


# ================================================================ check

def _walk(f):
    """{path: object} for every group and dataset (sorted)."""
    items = {"/": f}
    f.visititems(lambda name, obj: items.__setitem__("/" + name, obj))
    return dict(sorted(items.items()))


def _attr_equal(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


DEFINING_GROUPS = ("inputs", "weights", "rope", "generated", "needles")


def _defines_case(path: str) -> bool:
    """Datasets that define a case (inputs, weights, frequencies, overlays) rather than results."""
    parts = path.split("/")
    return any(g in parts for g in DEFINING_GROUPS) or (len(parts) >= 2 and parts[-1] == "x")


def _compare_values(path, dtype_attr, a, b, worst=None):
    """a = on disk, b = regenerated. Returns None or a reason. `worst` (a dict) collects, per
    class of result, the largest error / bound seen."""
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    if dtype_attr in ("int32", "uint8", "fp8_kv_v32") or _defines_case(path):
        if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            n = int(np.count_nonzero(a != b))
            return f"{n} of {a.size} elements differ (defines the case: must be identical)"
        return None
    if dtype_attr == "bfloat16":
        a, b = numerics.bf16_bits_to_f64(a), numerics.bf16_bits_to_f64(b)
        rel, what = tolerances.CHECK_BF16_REL, "bfloat16 (deployed precision)"
    elif dtype_attr == "float32":
        rel, what = tolerances.CHECK_FP32_REL, "float32 (deployed precision)"
    else:
        rel, what = tolerances.CHECK_TRUTH_REL, "float64 truth"
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return "NaN positions differ"
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or not np.array_equal(a[~fa & ~np.isnan(a)], b[~fb & ~np.isnan(b)]):
        return "infinity positions differ"
    if not fa.any():
        return None
    err = np.abs(a[fa] - b[fb]).max()
    bound = rel * np.abs(b[fb]).max()
    if worst is not None and bound > 0 and err / bound > worst.get(what, (0.0, ""))[0]:
        worst[what] = (err / bound, path)
    if err > bound:
        return f"max abs diff {err:.3e} > {bound:.3e} ({rel:.1e} x max magnitude)"
    return None


def compare_files(disk_path, regen_path):
    """Returns (ok, notes). Attributes (except provenance) and every dataset that defines a case
    exactly; the fp64 truth within CHECK_TRUTH_REL, deployed-precision float32 within
    CHECK_FP32_REL and bf16 within CHECK_BF16_REL (normwise: max |diff| <= rel * max |value|)."""
    problems, notes, worst = [], [], {}
    with h5py.File(disk_path, "r") as fa, h5py.File(regen_path, "r") as fb:
        A, B = _walk(fa), _walk(fb)
        if list(A) != list(B):
            missing = sorted(set(B) - set(A))[:5]
            extra = sorted(set(A) - set(B))[:5]
            problems.append(f"objects differ: missing {missing} extra {extra}")
            return False, problems
        for p in A:
            oa, ob = A[p], B[p]
            ka, kb = list(oa.attrs.keys()), list(ob.attrs.keys())
            if ka != kb:
                problems.append(f"{p}: attribute names {ka} != {kb}")
                continue
            for k in ka:
                if p == "/" and k in PROVENANCE_ATTRS:
                    if not _attr_equal(oa.attrs[k], ob.attrs[k]):
                        notes.append(f"provenance {k}: disk {oa.attrs[k]!r}, here {ob.attrs[k]!r}")
                    continue
                if not _attr_equal(oa.attrs[k], ob.attrs[k]):
                    problems.append(f"{p}: attribute {k}: {oa.attrs[k]!r} != {ob.attrs[k]!r}")
            if isinstance(oa, h5py.Dataset):
                if oa.dtype != ob.dtype:
                    problems.append(f"{p}: storage type {oa.dtype} != {ob.dtype}")
                    continue
                r = _compare_values(p, oa.attrs.get("dtype"), oa[()], ob[()], worst)
                if r:
                    problems.append(f"{p}: {r}")
    for what, (ratio, path) in sorted(worst.items()):
        notes.append(f"largest {what} difference: {ratio:.2e} of its bound ({path})")
    return not problems, problems + notes


def read_manifest(d):
    out = {}
    with open(os.path.join(d, "MANIFEST.sha256")) as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                h, n = line.split("  ", 1)
                out[n] = h
    return out


def check(dir_, families=FAMILIES):
    ok_all = True
    try:
        manifest = read_manifest(dir_)
    except OSError as e:
        print(f"FAIL MANIFEST.sha256: {e}")
        return False
    tmp = tempfile.mkdtemp(prefix="mla_goldens_check_")
    try:
        for fam in families:
            name = fam + ".h5"
            disk = os.path.join(dir_, name)
            if not os.path.exists(disk):
                print(f"FAIL {name}: missing")
                ok_all = False
                continue
            digest = sha256_file(disk)
            if manifest.get(name) != digest:
                print(f"FAIL {name}: sha256 {digest} does not match MANIFEST.sha256 ({manifest.get(name)})")
                ok_all = False
                continue
            with h5py.File(disk, "r") as f:
                command = f.attrs.get("command", CANONICAL_COMMAND)
            t0 = time.time()
            regen = os.path.join(tmp, name)
            write_family(fam, regen, command)
            dt = time.time() - t0
            if sha256_file(regen) == digest:
                print(f"PASS {name}: regenerated byte for byte ({dt:.1f} s)", flush=True)
                continue
            ok, notes = compare_files(disk, regen)
            verdict = "PASS" if ok else "FAIL"
            print(f"{verdict} {name}: regenerated within tolerance ({dt:.1f} s)" if ok else
                  f"FAIL {name}: ({dt:.1f} s)", flush=True)
            for n in notes[:20]:
                print(f"    {n}")
            ok_all &= ok
        extra = sorted(set(manifest) - {f + ".h5" for f in families})
        if extra and families == FAMILIES:
            print(f"FAIL MANIFEST.sha256: unknown entries {extra}")
            ok_all = False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("goldens check:", "PASS" if ok_all else "FAIL")
    return ok_all


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python3 -m mla_ref.goldens", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="regenerate the catalog")
    w.add_argument("--out", required=True)
    w.add_argument("--family", action="append", choices=FAMILIES, help="only these families (repeatable)")
    c = sub.add_parser("check", help="regenerate into a temporary folder and compare")
    c.add_argument("--dir", required=True)
    c.add_argument("--family", action="append", choices=FAMILIES)
    a = ap.parse_args(argv)
    if a.cmd == "write":
        command = "python3 -m mla_ref.goldens " + " ".join(argv)
        write_all(a.out, command, tuple(a.family or FAMILIES))
        return 0
    return 0 if check(a.dir, tuple(a.family or FAMILIES)) else 1


if __name__ == "__main__":
    sys.exit(main())
