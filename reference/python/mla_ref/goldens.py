"""Writes and checks the golden catalog (fixtures/SCHEMA.md).

    PYTHONPATH=reference/python /usr/bin/python3 -m mla_ref.goldens write --out fixtures/goldens
    PYTHONPATH=reference/python /usr/bin/python3 -m mla_ref.goldens check --dir fixtures/goldens

`write` is deterministic: with the same torch/numpy/h5py/zlib it reproduces every file byte for
byte (datasets without timestamps, attributes and objects in a fixed order, no ambient state).
`check` regenerates into a temporary folder and compares dataset by dataset (see `compare_files`).

Here: the families (each registered for its name with `@family_writer` or `@attention_family`),
the files and their manifest, `check` and the command line. How an HDF5 file is written and
compared is golden_h5.py; how an attention-core case is built from its spec, attn_cases.py.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import time

import h5py
import numpy as np
import torch

from . import __version__, catalog, config, layer, numerics, rope
from .attn_cases import DEFAULT_SCALE, AttnSpec, make_indices, write_attn_specs
from . import prefill_cases as pc
from .indexer_cases import IndexerSpec, write_indexer_specs
from .golden_h5 import Node, compare_files

SCHEMA_VERSION = 2
CANONICAL_COMMAND = "python3 -m mla_ref.goldens write --out fixtures/goldens"
# The families and their seeds are the catalog description's (fixtures/catalog.json).
FAMILIES = catalog.NAMES
FAMILY_SEEDS = {f.name: f.seed for f in catalog.FAMILIES}
V3_SCALE = config.preset("v3").softmax_scale


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


# (name, description, preset, batch, prefill length, decode steps, inputs stored); case i has seed
# full_layer's seed + i
FULL_LAYER_CASES = [
    ("tiny_qlora_yarn", "tiny preset, q-LoRA on, YaRN on: prefill 5 then 4 decode steps, batch 2", "tiny", 2, 5, 4, 1),
    ("tiny_noqlora_yarn", "tiny preset, single wq (q-LoRA off), YaRN on", "tiny-noqlora", 2, 5, 4, 1),
    ("tiny_qlora_noyarn", "tiny preset, q-LoRA on, YaRN off (max_seq_len == original_seq_len)", "tiny-noyarn", 2, 5, 4, 1),
    ("tiny_noqlora_noyarn", "tiny preset, q-LoRA off, YaRN off", "tiny-noqlora-noyarn", 2, 5, 4, 1),
    ("v2_lite", "DeepSeek-V2-Lite shape (no q-LoRA, mscale 0.707), generated weights: prefill 3 then 4 decodes",
     "v2-lite", 1, 3, 4, 0),
    ("v3_tp8", "DeepSeek-V3 shape, one TP8 shard (16 heads), generated weights: prefill 3 then 4 decodes",
     "v3-tp8", 1, 3, 4, 0),
]


def full_layer_seed(name: str) -> int:
    """The seed of full_layer case `name` (its weights and token streams)."""
    names = [c[0] for c in FULL_LAYER_CASES]
    return FAMILY_SEEDS["full_layer"] + names.index(name)


@family_writer("full_layer")
def write_full_layer(root: Node, seed0: int):
    for i, (name, desc, pr, b, pre, nd, stored) in enumerate(FULL_LAYER_CASES):
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


# ================================================================ attention-core families

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


# ================================================================ prefill and merge

@family_writer("prefill")
def write_prefill(root: Node, seed0: int):
    S, L = pc.PrefillSpec, pc.layer_spec
    v3 = config.preset("v3").softmax_scale
    v3_layer_seed = full_layer_seed("v3_tp8")
    pc.write_prefill_specs(root, seed0, [
        S("h1_varlen", "1 head, causal varlen batch of lengths 0, 1, 63, 64, 65 (s_q = s_k), generated inputs",
          heads=1, seqs=[(0, 0), (1, 1), (63, 63), (64, 64), (65, 65)]),
        S("h3_chunked", "3 heads, causal: a chunk of 5 over a 64-token prefix, s_q = s_k = 2, and s_q 3 over "
          "s_k 1 (its first two rows attend nothing)", heads=3, seqs=[(5, 69), (2, 2), (3, 1)]),
        S("h16_chunked", "16 heads, causal: 3 queries over 17 keys and 1 over 1", heads=16, seqs=[(3, 17), (1, 1)]),
        S("h128_v3_scale", "128 heads, V3 softmax scale, causal: 1 query over 5 keys and 1 over 1, generated inputs",
          heads=128, seqs=[(1, 5), (1, 1)], scale=v3),
        S("noncausal_context", "non-causal context chunk, 2 heads: 4 queries over 70 keys, 3 over none "
          "(kv_len 0: out 0, lse +inf) and 2 over 5", heads=2, seqs=[(4, 70), (3, 0), (2, 5)], causal=False),
        S("q_std100", "q with std 100 (logits in the hundreds), 2 heads, causal 16 over 48",
          heads=2, seqs=[(16, 48)], q_std=100.0),
        S("long_prefix", "a chunk of 3 queries over a prefix of 1200 keys and 2 over 2, 2 heads: several key "
          "chunks of any blocked implementation", heads=2, seqs=[(3, 1203), (2, 2)]),
        S("dominant_logit", "head 0 has one key ~37 above every other logit (probability ~1 in fp32), causal 8 "
          "over 40, stored inputs", heads=2, seqs=[(8, 40)], stored=True, modify=pc.dominant_logit),
        S("needles_diagonal", "needles on the causal diagonal, at 64-key tile edges and the prefix/chunk "
          "boundary: 16 queries over 80 keys and 3 over 3, 2 heads, stored inputs",
          heads=2, seqs=[(16, 80), (3, 3)], stored=True, needles=True),
        # The layer of full_layer's v3_tp8 (its seed), cut to 2 heads: those heads' q, k, v are
        # the 16-head case's, and sequence 0 of the first case is that case's 3-token prefill.
        L("layer_v3_causal", "from the layer: v3-tp8 weights (full_layer v3_tp8 seed) cut to 2 heads, YaRN "
          "scale with mscale^2, causal prefill of 3, 8 and 1 tokens; k_pe shared by the heads",
          preset="v3-tp8", heads=2, seqs=[(3, 3), (8, 8), (1, 1)], seed=v3_layer_seed),
        L("layer_v3_chunked", "from the layer: as layer_v3_causal, a chunk of the last 3 of 32 tokens over "
          "the cached 29 and a 2-token prefill", preset="v3-tp8", heads=2, seqs=[(3, 32), (2, 2)],
          seed=v3_layer_seed),
    ])


@family_writer("merge")
def write_merge(root: Node, seed0: int):
    S = pc.MergeSpec
    specs = [S(f"random_{dt}", f"finite states, out {dt}, 4 heads, 5 tokens", tokens=5, heads=4, out_dtype=dt)
             for dt in pc.MERGE_DTYPES]
    specs += [S(f"empty_rows_{dt}", f"either side empty with +inf and with -inf, both empty (+inf, -inf, mixed), "
                f"NaN in an empty side's out; out {dt}", tokens=8, heads=4, out_dtype=dt, modify=pc.empty_rows)
              for dt in pc.MERGE_DTYPES]
    specs += [
        S("a_empty_pinf", "side a attended nothing (lse +inf everywhere)", tokens=3, heads=4,
          modify=pc.side_empty("a", float("inf"))),
        S("b_empty_ninf", "side b attended nothing (lse -inf everywhere), out bf16", tokens=3, heads=4,
          out_dtype="bf16", modify=pc.side_empty("b", float("-inf"))),
        S("lse_diff_1000", "lse_b = lse_a +- 1000 around lse_a ~ 500 (every exp(lse) overflows)", tokens=4, heads=4,
          modify=pc.lse_apart),
        S("h128", "128 heads, 1 token, out bf16", tokens=1, heads=128, out_dtype="bf16"),
        S("d512", "head dim 512 (the absorbed decode's split-KV partials), 2 heads, 3 tokens, out bf16",
          tokens=3, heads=2, head_dim=512, out_dtype="bf16"),
    ]
    pc.write_merge_specs(root, seed0, specs)


# ================================================================ the V3.2 indexer

@family_writer("indexer")
def write_indexer(root: Node, seed0: int):
    S = IndexerSpec
    specs = []
    # The same inputs under both RoPE layouts and both scale formats: a kernel of the wrong layout
    # or format fails on them (test_indexer_goldens.py checks that the selections differ).
    for fmt in ("ue8m0", "fp32"):
        for layout in ("interleaved", "half"):
            specs.append(S(f"tiny_{layout}_{fmt}", f"tiny layer, 4 index heads, top-8: batch 2, a 12-token prompt "
                           f"then a decode step, RoPE {layout}, {fmt} scales", preset="tiny-indexer", batch=2,
                           prompt=12, decode_steps=1, rope_layout=layout, scale_fmt=fmt, seed=seed0))
    specs.append(S("h64_half_ue8m0", "V3.2's 64 index heads on the tiny layer, top-4: a 5-token prompt then a "
                   "decode step, RoPE half, ue8m0 scales", preset="tiny-indexer-h64", batch=1, prompt=5,
                   decode_steps=1, rope_layout="half", scale_fmt="ue8m0", seed=seed0 + 1))
    write_indexer_specs(root, specs)


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
