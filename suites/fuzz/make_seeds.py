#!/usr/bin/python3
"""Writes the fuzzers' seed inputs into OUT (deterministic):

    /usr/bin/python3 suites/fuzz/make_seeds.py OUT

OUT/golden_loader/     small schema-valid files of every family, so that mutations start deep in
                       the loader rather than at the HDF5 signature:
                         syn_*.h5    written here with fixtures/bad/make_corpus.py's helpers
                                     (tiny shapes, zeros where the loader never looks: it checks
                                     dtypes, shapes, paging, generated digests and the FP8 codec,
                                     not the maths), schema versions 1 and 2 (an FP8 recipe, a
                                     needle overlay); gzip+shuffle chunked outputs as the real writer
                                     has them, and one file in h5py's default (oldest) format, the
                                     real goldens' (a slim copy of a real case is 300 KiB: too big
                                     for a fuzzing input)
                       plus the bad-file corpus fixtures/bad/*.h5 and its good/ catalog.
OUT/catalog_manifest/  manifests: the real one, the bad corpus's, and a few edge cases.

The fuzzer then grows and minimizes this into suites/fuzz/corpus/ (suites/fuzz/README.md).
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import sys

import h5py
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "fixtures", "bad"))
import make_corpus as mc  # noqa: E402  (the corpus writer's file, group, dataset helpers)

D, DV, TOK = mc.D, mc.DV, mc.TOK


def put(g, name, arr, dtype_attr, gzip=False):
    data = np.ascontiguousarray(np.asarray(arr).astype(mc.STORAGE[dtype_attr]))
    kw = dict(compression="gzip", shuffle=True, chunks=True) if gzip and data.ndim else {}
    d = g.create_dataset(name, data=data, track_times=False, **kw)
    d.attrs.create("dtype", dtype_attr, dtype=h5py.string_dtype("utf-8"))


def rand(seed, stream, shape, std=1.0):
    return mc.gen_values(seed, stream, shape, 0.0, std)


def attn_results(g, b, sq, h, seed, fp8=False):
    # Shapes and dtypes only: the loader never recomputes attention. The outputs are zeros,
    # compressed, so that a seed (and every input grown from it) stays a few KiB.
    zeros = np.zeros((b, sq, h, DV))
    t = mc.grp(g, "truth")
    put(t, "out", zeros, "float64", gzip=True)
    put(t, "lse", rand(seed, 11, (b, h, sq)), "float64")
    s = mc.grp(g, "same_dtype")
    put(s, "out", mc.bf16_bits(zeros), "bfloat16", gzip=True)
    put(s, "lse", rand(seed, 13, (b, h, sq)).astype(np.float32), "float32")
    if fp8:
        u = mc.grp(g, "unquantized")
        put(u, "out", zeros, "float64", gzip=True)
        put(u, "lse", rand(seed, 15, (b, h, sq)), "float64")


def attn_case(cases, name, *, seed, b=1, sq=1, h=1, ps=2, lens=(3,), topk=0, fp8=False, gzip=False,
              causal=1):
    nb = sum(-(-L // ps) for L in lens) + 1  # one spare block: NaN-poisoned, never addressed
    mb = max(-(-L // ps) for L in lens) + 1  # one sentinel column
    g = mc.grp(cases, name)
    items = [("kind", "attn_core"), ("description", f"fuzz seed {name}"), ("batch", b), ("s_q", sq),
             ("heads", h), ("d_qk", D), ("d_v", DV), ("page_size", ps), ("num_blocks", nb),
             ("max_blocks", mb), ("cache_format", "fp8" if fp8 else "bf16")]
    if fp8:
        items.append(("scale_fmt", "fp32"))
    items += [("topk", topk), ("softmax_scale", mc.SCALE), ("causal", causal),
              ("sentinel_block_id", mc.SENTINEL), ("seed", seed), ("inputs_stored", 1)]
    mc.attrs(g, items)
    bt, used = mc.block_table(list(lens), ps, nb, mb, seed, 2)
    inp = mc.grp(g, "inputs")
    put(inp, "q", mc.bf16_bits(rand(seed, 0, (b, sq, h, D))), "bfloat16", gzip)
    if fp8:
        src = mc.bf16_values(mc.bf16_bits(rand(seed, 1, (nb, ps, D))))
        toks = np.zeros((nb, ps, TOK), dtype=np.uint8)
        deq = np.full((nb, ps, D), np.nan)
        for blk in range(nb):
            for o in range(ps):
                if used[blk, o]:
                    toks[blk, o] = mc.fp8_token(src[blk, o, :DV], src[blk, o, DV:], "fp32")
                    deq[blk, o] = mc.fp8_dequant(toks[blk, o])
                else:
                    toks[blk, o, :512] = 0x7F
        put(inp, "kv_cache", toks, "fp8_kv_v32", gzip)
        put(inp, "kv_cache_dequant", deq, "float64", gzip)
    else:
        cache = mc.bf16_bits(rand(seed, 1, (nb, ps, D)))
        cache[~used] = 0x7FC0
        put(inp, "kv_cache", cache, "bfloat16", gzip)
    put(inp, "block_table", bt, "int32")
    put(inp, "cache_seqlens", np.array(lens), "int32")
    if topk:
        # Valid, out-of-range and negative indices, as the sparse family has them.
        idx = np.array([[[(j * 7) % (lens[i] + 2) - (1 if j == topk - 1 else 0) for j in range(topk)]
                         for _ in range(sq)] for i in range(b)])
        put(inp, "indices", idx, "int32")
    attn_results(g, b, sq, h, seed, fp8)


def attn_generated(cases, name, seed, nb=1, mb=2, lens=(2,), block_table=None):
    # Generated q and cache (inputs_stored 0); by default lengths a multiple of the page, no
    # spare block.
    b, sq, h, ps = 1, 1, 2, 2
    g = mc.grp(cases, name)
    mc.attrs(g, [("kind", "attn_core"), ("description", f"fuzz seed {name}"), ("batch", b), ("s_q", sq),
                 ("heads", h), ("d_qk", D), ("d_v", DV), ("page_size", ps), ("num_blocks", nb),
                 ("max_blocks", mb), ("cache_format", "bf16"), ("topk", 0), ("softmax_scale", mc.SCALE),
                 ("causal", 1), ("sentinel_block_id", mc.SENTINEL), ("seed", seed), ("inputs_stored", 0)])
    gen = mc.grp(g, "generated")
    for tname, stream, shape in (("q", 0, (b, sq, h, D)), ("kv_cache", 1, (nb, ps, D))):
        bits = mc.bf16_bits(rand(seed, stream, shape))
        mc.attrs(mc.grp(gen, tname), [
            ("algorithm", "splitmix64-uniform-v1"), ("seed", seed), ("stream", stream), ("mean", 0.0),
            ("std", 1.0), ("shape", np.array(shape, dtype=np.int64)), ("dtype", "bfloat16"),
            ("sha256", hashlib.sha256(bits.astype("<u2").tobytes()).hexdigest())])
    inp = mc.grp(g, "inputs")
    put(inp, "block_table", np.array(block_table or [[0, mc.SENTINEL]]), "int32")
    put(inp, "cache_seqlens", np.array(list(lens)), "int32")
    attn_results(g, b, sq, h, seed)
    return g


def attn_fp8_recipe(cases, name, seed):
    # Schema version 2: an FP8 case that names its recipe. Block maxima ~1.7 are far above the
    # recipes' crossover, so the corpus writer's (DeepSeek) encoder writes FlashMLA's bytes too.
    attn_case(cases, name, seed=seed, ps=1, lens=(2,), fp8=True)
    cases[name].attrs.create("fp8_recipe", "flashmla", dtype=h5py.string_dtype("utf-8"))


def attn_needles(cases, name, seed):
    # Schema version 2: generated q and cache with a poisoned spare block and a needle overlay
    # (fixtures/SCHEMA.md "Needles"; the loader checks its structure, not the placement rule).
    b, h = 1, 2
    g = attn_generated(cases, name, seed, nb=3, mb=3, lens=(4,), block_table=[[2, 0, mc.SENTINEL]])
    nd = mc.grp(g, "needles")
    mc.attrs(nd, [("rule", "needles-v1"), ("alpha", 4096.0)])
    tok = np.zeros((2, D))
    tok[0, 0], tok[1, 1], tok[0, DV], tok[1, DV] = 2.0, 2.0, 4096.0, 4096.0
    put(nd, "positions", np.array([[0, 0], [0, 3]]), "int32")
    put(nd, "kv", mc.bf16_bits(tok), "bfloat16")
    mask = np.zeros((b, D), np.uint8)
    mask[0, :2], mask[0, DV] = 1, 1
    qv = np.zeros((b, h, D))
    qv[0, 0, DV] = 1.0
    put(nd, "q_mask", mask, "uint8")
    put(nd, "q_values", mc.bf16_bits(qv), "bfloat16")


def write_attn(path, family, builders, earliest=False, schema_version=1):
    # `earliest`: h5py's defaults (the oldest file format, object timestamps), as the real
    # goldens are written, instead of the corpus writer's compact 1.8 format.
    with (h5py.File(path, "w") if earliest else mc.new_file(path)) as f:
        cases = mc.root(f, family, 99)
        if schema_version != 1:
            f.attrs.modify("schema_version", np.int64(schema_version))
        for b in builders:
            b(cases)


# A layer small enough that every array is a few dozen values.
TINY = dict(dim=4, n_heads=2, kv_lora_rank=2, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2,
            rope_theta=10000.0, rope_factor=40.0, beta_fast=32.0, beta_slow=1.0, mscale=1.0,
            max_batch_size=2)


def layer_attrs(g, kind, name, seed, q_lora, max_seq, orig_seq, batch, n_steps, stored):
    cfg = dict(TINY, q_lora_rank=q_lora, max_seq_len=max_seq, original_seq_len=orig_seq)
    mc.attrs(g, [("kind", kind), ("description", f"fuzz seed {name}"), ("preset", "fuzz")] +
             [(k, cfg[k]) for k in ("dim", "n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                    "qk_rope_head_dim", "v_head_dim", "max_seq_len", "original_seq_len",
                                    "rope_theta", "rope_factor", "beta_fast", "beta_slow", "mscale",
                                    "max_batch_size")] +
             [("batch", batch), ("softmax_scale", 0.5), ("yarn", int(max_seq > orig_seq)), ("n_steps", n_steps),
              ("seed", seed), ("inputs_stored", int(stored))])
    return cfg


def layer_weights(g, cfg, seed, stored, gzip):
    h, dim, qk = cfg["n_heads"], cfg["dim"], cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    ws = ([("wq", (h * qk, dim))] if cfg["q_lora_rank"] == 0 else
          [("wq_a", (cfg["q_lora_rank"], dim)), ("q_norm", (cfg["q_lora_rank"],)),
           ("wq_b", (h * qk, cfg["q_lora_rank"]))])
    ws += [("wkv_a", (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], dim)), ("kv_norm", (cfg["kv_lora_rank"],)),
           ("wkv_b", (h * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"])),
           ("wo", (dim, h * cfg["v_head_dim"]))]
    if stored:
        w = mc.grp(g, "weights")
        for i, (n, shape) in enumerate(ws):
            put(w, n, mc.bf16_bits(rand(seed, 20 + i, shape)), "bfloat16", gzip)
    else:
        gen = mc.grp(g, "generated")
        for i, (n, shape) in enumerate(ws):
            bits = mc.bf16_bits(rand(seed, 20 + i, shape))
            mc.attrs(mc.grp(gen, "weights_" + n), [
                ("algorithm", "splitmix64-uniform-v1"), ("seed", seed), ("stream", 20 + i), ("mean", 0.0),
                ("std", 1.0), ("shape", np.array(shape, dtype=np.int64)), ("dtype", "bfloat16"),
                ("sha256", hashlib.sha256(bits.astype("<u2").tobytes()).hexdigest())])
    put(mc.grp(g, "rope"), "inv_freq", rand(seed, 30, (cfg["qk_rope_head_dim"] // 2,)), "float64")


def layer_step(parent, name, cfg, b, start, s, seed, outputs=True, intermediates=False, gzip=False):
    st = mc.grp(parent, name)
    x = put(st, "x", mc.bf16_bits(rand(seed, 40 + start, (b, s, cfg["dim"]))), "bfloat16", gzip)
    del x
    st["x"].attrs.create("start_pos", np.int64(start))
    if not outputs:
        return
    h, T = cfg["n_heads"], start + s
    for pipe, dt in (("fp64", "float64"), ("fp32", "float32"), ("bf16", "bfloat16")):
        p = mc.grp(st, pipe)
        for form in ("naive", "absorbed"):
            fg = mc.grp(p, form)
            v = rand(seed, 50 + T, (b, s, cfg["dim"]))
            put(fg, "out", mc.bf16_bits(v) if dt == "bfloat16" else v.astype(dt), dt)
            if intermediates and pipe == "fp64":
                put(fg, "scores", rand(seed, 60, (b, s, h, T)), "float64")
                put(fg, "k_pe", rand(seed, 61, (b, s, cfg["qk_rope_head_dim"])), "float64")
                extra = ("q_absorbed", (b, s, h, cfg["kv_lora_rank"])) if form == "absorbed" else \
                        ("attn_out", (b, s, h, cfg["v_head_dim"]))
                put(fg, extra[0], rand(seed, 62, extra[1]), "float64")


def full_layer_case(cases, name, seed, q_lora, stored, gzip=False):
    g = mc.grp(cases, name)
    cfg = layer_attrs(g, "full_layer", name, seed, q_lora, 4, 2 if q_lora else 4, 1, 2, stored)
    layer_weights(g, cfg, seed, stored, gzip)
    steps = mc.grp(g, "steps")
    layer_step(steps, "0", cfg, 1, 0, 2, seed, intermediates=True, gzip=gzip)
    layer_step(steps, "1", cfg, 1, 2, 1, seed)
    fc = mc.grp(mc.grp(mc.grp(g, "final_cache"), "fp64"), "absorbed")
    put(fc, "kv_cache", rand(seed, 70, (1, 3, cfg["kv_lora_rank"])), "float64")
    put(fc, "pe_cache", rand(seed, 71, (1, 3, cfg["qk_rope_head_dim"])), "float64")


def boundary_case(cases, name, seed):
    g = mc.grp(cases, name)
    cfg = layer_attrs(g, "cache_boundary", name, seed, 0, 3, 3, 1, 1, True)
    g.attrs.create("expected_error", "cache capacity exceeded", dtype=h5py.string_dtype("utf-8"))
    layer_weights(g, cfg, seed, True, False)
    layer_step(mc.grp(g, "steps"), "0", cfg, 1, 0, 2, seed)
    layer_step(g, "accept", cfg, 1, 2, 1, seed)
    layer_step(g, "reject", cfg, 1, 3, 1, seed, outputs=False)


def write_layer(path, family, builders):
    with mc.new_file(path) as f:
        cases = mc.root(f, family, 98)
        for b in builders:
            b(cases)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    gl, cm = os.path.join(out, "golden_loader"), os.path.join(out, "catalog_manifest")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(gl)
    os.makedirs(cm)

    write_attn(os.path.join(gl, "syn_attn_core.h5"), "attn_core", [
        lambda c: attn_case(c, "varlen_b2_sq2", seed=21, b=2, sq=2, h=1, ps=2, lens=(3, 0)),
        lambda c: attn_generated(c, "generated", 22)])
    write_attn(os.path.join(gl, "syn_attn_core_earliest.h5"), "attn_core", [
        lambda c: attn_case(c, "earliest_format", seed=27, ps=2, lens=(3,))], earliest=True)
    write_attn(os.path.join(gl, "syn_attn_core_gzip.h5"), "attn_core", [
        lambda c: attn_case(c, "gzip_ps1", seed=23, ps=1, lens=(2,), gzip=True)])
    write_attn(os.path.join(gl, "syn_attn_fp8.h5"), "attn_fp8", [
        lambda c: attn_case(c, "fp8_fp32", seed=24, ps=1, lens=(1,), fp8=True)])
    write_attn(os.path.join(gl, "syn_attn_sparse.h5"), "attn_sparse", [
        lambda c: attn_case(c, "sparse_bf16_topk4", seed=25, sq=2, lens=(3,), topk=4, causal=0)])
    write_attn(os.path.join(gl, "syn_attn_stress.h5"), "attn_stress", [
        lambda c: attn_case(c, "stress_one", seed=26, ps=4, lens=(4,))])
    write_attn(os.path.join(gl, "syn_attn_fp8_v2.h5"), "attn_fp8", [
        lambda c: attn_fp8_recipe(c, "fp8_flashmla", 28)], schema_version=2)
    write_attn(os.path.join(gl, "syn_attn_stress_v2.h5"), "attn_stress", [
        lambda c: attn_needles(c, "needles", 29)], schema_version=2)
    write_layer(os.path.join(gl, "syn_full_layer.h5"), "full_layer", [
        lambda c: full_layer_case(c, "noqlora_noyarn", 31, 0, True),
        lambda c: full_layer_case(c, "qlora_yarn_gzip", 32, 3, True, gzip=True)])
    write_layer(os.path.join(gl, "syn_full_layer_generated.h5"), "full_layer", [
        lambda c: full_layer_case(c, "generated", 33, 3, False)])
    write_layer(os.path.join(gl, "syn_cache_boundary.h5"), "cache_boundary", [
        lambda c: boundary_case(c, "boundary", 34)])

    goldens = os.path.join(ROOT, "fixtures", "goldens")

    bad = os.path.join(ROOT, "fixtures", "bad")
    for p in sorted(glob.glob(os.path.join(bad, "*.h5")) + glob.glob(os.path.join(bad, "good", "*.h5"))):
        rel = os.path.relpath(p, bad).replace(os.sep, "_")
        shutil.copyfile(p, os.path.join(gl, "bad_" + rel))

    shutil.copyfile(os.path.join(goldens, "MANIFEST.sha256"), os.path.join(cm, "goldens"))
    for p in sorted(glob.glob(os.path.join(bad, "*", "MANIFEST.sha256"))):
        shutil.copyfile(p, os.path.join(cm, "bad_" + os.path.basename(os.path.dirname(p))))
    h = "0123456789abcdef" * 4
    for name, text in (("binary_mode", f"{h} *a.h5\n"), ("crlf", f"{h}  a.h5\r\n\r\n"),
                       ("path", f"{h}  ../a.h5\n"), ("twice", f"{h}  a.h5\n{h}  a.h5\n"), ("empty", "")):
        with open(os.path.join(cm, name), "w", newline="") as fh:
            fh.write(text)
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    print(f"{out}: {sum(len(f) for _, _, f in os.walk(out))} seeds, {total / 1024:.0f} KiB", file=sys.stderr)


if __name__ == "__main__":
    main()
