"""The catalog on disk: manifest, schema attributes, dtypes and shapes, and spot checks that the
stored results are what the reference computes from the stored (or regenerated) inputs."""
import hashlib
import os

import h5py
import numpy as np
import pytest

from catalog_dir import GOLDENS
from mla_ref import attention as A
from mla_ref import catalog, config, generator, goldens, layer, needles, numerics
from mla_ref import tolerances as T

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(GOLDENS, "MANIFEST.sha256")),
                                reason="no golden catalog (run: ./mla.sh goldens)")

STORAGE = {"float64": ("f", 8), "float32": ("f", 4), "bfloat16": ("u", 2), "float16": ("u", 2), "int32": ("i", 4),
           "fp8_kv_v32": ("u", 1), "uint8": ("u", 1)}


def _files():
    return [f + ".h5" for f in goldens.FAMILIES]


def test_manifest_matches_files():
    m = goldens.read_manifest(GOLDENS)
    assert sorted(m) == sorted(_files())
    lines = open(os.path.join(GOLDENS, "MANIFEST.sha256")).read().splitlines()
    assert [l.split("  ")[1] for l in lines] == sorted(m)  # sorted by name, sha256sum format
    for name, digest in m.items():
        h = hashlib.sha256(open(os.path.join(GOLDENS, name), "rb").read()).hexdigest()
        assert h == digest, name
    total = sum(os.path.getsize(os.path.join(GOLDENS, n)) for n in m)
    assert total <= 40 * 2 ** 20


def _datasets(f):
    out = []
    f.visititems(lambda n, o: out.append((n, o)) if isinstance(o, h5py.Dataset) else None)
    return out


@pytest.mark.parametrize("name", _files())
def test_schema_attrs_and_dtypes(name):
    with h5py.File(os.path.join(GOLDENS, name), "r") as f:
        a = f.attrs
        assert a["schema_version"] == goldens.SCHEMA_VERSION == 2 and a["family"] == name[:-3]
        for k in ("generator_version", "torch_version", "numpy_version", "h5py_version", "python_version", "command"):
            assert isinstance(a[k], str) and a[k]
        assert a["seed"] == goldens.FAMILY_SEEDS[name[:-3]]
        assert len(f["cases"]) > 0
        for cname, case in f["cases"].items():
            assert all(c.isalnum() and c == c.lower() or c == "_" for c in cname)
            assert isinstance(case.attrs["description"], str)
            assert case.attrs["inputs_stored"] in (0, 1)
        for n, d in _datasets(f):
            kind, size = STORAGE[d.attrs["dtype"]]
            assert d.dtype.kind == kind and d.dtype.itemsize == size, n
            assert d.dtype.byteorder in ("<", "|", "="), n


ATTN_FAMILIES = tuple(f.file for f in catalog.FAMILIES if f.kind == "attention")


@pytest.mark.parametrize("name", ATTN_FAMILIES)
def test_attn_cases_shapes_and_poison(name):
    with h5py.File(os.path.join(GOLDENS, name), "r") as f:
        for cname, c in f["cases"].items():
            at = c.attrs
            b, s_q, h, ps, nb, mb = (int(at[k]) for k in ("batch", "s_q", "heads", "page_size", "num_blocks", "max_blocks"))
            assert at["kind"] == catalog.family(f.attrs["family"]).case_kind and at["d_qk"] == 576 and at["d_v"] == 512
            assert at["sentinel_block_id"] == 2147483647
            assert at["causal"] == (0 if at["topk"] else 1)
            bt, sl = c["inputs/block_table"][()], c["inputs/cache_seqlens"][()]
            assert bt.shape == (b, mb) and sl.shape == (b,)
            for i in range(b):
                n = -(-int(sl[i]) // ps)
                assert (bt[i, n:] == 2147483647).all() and (bt[i, :n] >= 0).all() and (bt[i, :n] < nb).all()
            assert c["truth/out"].shape == (b, s_q, h, 512) and c["truth/lse"].shape == (b, h, s_q)
            assert c["same_dtype/out"].shape == (b, s_q, h, 512) and c["same_dtype/lse"].shape == (b, h, s_q)
            if at["inputs_stored"]:
                assert c["inputs/q"].shape == (b, s_q, h, 576)
                fmt = at["cache_format"]
                kv = c["inputs/kv_cache"][()]
                assert kv.shape == (nb, ps, 576 if fmt == "bf16" else 656)
                used = np.zeros((nb, ps), bool)
                for i in range(b):
                    for t in range(int(sl[i])):
                        used[bt[i, t // ps], t % ps] = True
                if fmt == "bf16":
                    assert (kv[~used] == 0x7FC0).all()
                    assert not np.isnan(numerics.bf16_bits_to_f64(kv[used])).any()
                else:
                    assert (kv[~used] == numerics.fp8_poison_token()).all()
                    assert np.array_equal(c["inputs/kv_cache_dequant"][()], numerics.fp8_dequantize(kv), equal_nan=True)
                    # The bf16 cache before quantization: poisoned like a bf16 cache, and the
                    # bytes are exactly its encoding (what an append kernel is held to).
                    kb = c["inputs/kv_cache_bf16"]
                    assert kb.attrs["dtype"] == "bfloat16" and kb.shape == (nb, ps, 576)
                    kb = kb[()]
                    assert (kb[~used] == 0x7FC0).all()
                    vals = numerics.bf16_bits_to_f64(kb[used])
                    assert not np.isnan(vals).any()
                    assert at["fp8_recipe"] in numerics.FP8_RECIPES
                    enc = numerics.fp8_quantize(vals[:, :512], vals[:, 512:], at["scale_fmt"], at["fp8_recipe"])
                    assert np.array_equal(enc, kv[used]), cname
            else:
                for g in ("q", "kv_cache"):
                    ga = c["generated"][g].attrs
                    assert ga["algorithm"] == "splitmix64-uniform-v1" and len(ga["sha256"]) == 64
            if at["topk"]:
                assert c["inputs/indices"].shape == (b, s_q, int(at["topk"]))


def _used(c):
    at = c.attrs
    nb, ps, mb = int(at["num_blocks"]), int(at["page_size"]), int(at["max_blocks"])
    bt, sl = c["inputs/block_table"][()], c["inputs/cache_seqlens"][()]
    used = np.zeros((nb, ps), bool)
    for i, L in enumerate(sl):
        t = np.arange(int(L))
        used[bt[i, t // ps], t % ps] = True
    return used


def _apply_needles(c, q, cache):
    """The reader's side of SCHEMA.md "Needles": the stored overlay, written over q and the cache."""
    if "needles" not in c:
        return
    g = c["needles"]
    bt, ps = c["inputs/block_table"][()], int(c.attrs["page_size"])
    mask, qv = g["q_mask"][()].astype(bool), numerics.bf16_bits_to_f64(g["q_values"][()])
    for i in range(q.shape[0]):
        q[i][..., mask[i]] = qv[i][None, :, mask[i]]
    for (i, t), tok in zip(g["positions"][()], numerics.bf16_bits_to_f64(g["kv"][()])):
        cache[bt[i, t // ps], t % ps] = tok


def _load_attn(c):
    at = c.attrs
    if at["inputs_stored"]:
        q = numerics.bf16_bits_to_f64(c["inputs/q"][()])
        if at["cache_format"] == "bf16":
            cache = numerics.bf16_bits_to_f64(c["inputs/kv_cache"][()])
        else:
            cache = numerics.fp8_dequantize(c["inputs/kv_cache"][()])
    else:
        gt = {}
        for g in ("q", "kv_cache"):
            ga = c["generated"][g].attrs
            t = generator.GeneratedTensor(ga["seed"], ga["stream"], ga["shape"], ga["dtype"], ga["mean"], ga["std"])
            assert t.sha256() == ga["sha256"]
            gt[g] = t.values()
        q, cache = gt["q"], gt["kv_cache"]
        _apply_needles(c, q, cache)
        cache[~_used(c)] = np.nan
    idx = c["inputs/indices"][()] if at["topk"] else None
    return q, cache, c["inputs/block_table"][()], c["inputs/cache_seqlens"][()], idx


@pytest.mark.parametrize("name", ATTN_FAMILIES)
def test_attn_truth_recomputes(name):
    """Recompute the fp64 truth (and the same-dtype reference) of every small case from the file."""
    with h5py.File(os.path.join(GOLDENS, name), "r") as f:
        for cname, c in f["cases"].items():
            if c.attrs["batch"] * max(c["inputs/cache_seqlens"][()]) > 20000:
                continue  # long context: covered by `goldens check` (L1)
            q, cache, bt, sl, idx = _load_attn(c)
            sc = float(c.attrs["softmax_scale"])
            out, lse = A.attention(q, cache, bt, sl, sc, True, idx, "truth")
            t_out, t_lse = c["truth/out"][()], c["truth/lse"][()]
            assert np.abs(out - t_out).max() <= T.CHECK_TRUTH_REL * max(np.abs(t_out).max(), 1e-300), cname
            fin = np.isfinite(t_lse)
            assert np.array_equal(np.isfinite(lse), fin) and np.array_equal(lse[~fin], t_lse[~fin])
            assert np.abs(lse[fin] - t_lse[fin]).max(initial=0) <= T.CHECK_TRUTH_REL * np.abs(t_lse[fin]).max(initial=1)


def test_full_layer_cases():
    with h5py.File(os.path.join(GOLDENS, "full_layer.h5"), "r") as f:
        names = set(f["cases"])
        assert {"tiny_qlora_yarn", "tiny_noqlora_yarn", "tiny_qlora_noyarn", "tiny_noqlora_noyarn", "v2_lite", "v3_tp8"} <= names
        for cname, c in f["cases"].items():
            at = c.attrs
            a = config.ModelArgs(**{k: (int(at[k]) if k in config.INT_FIELDS else float(at[k])) for k in config.FIELDS})
            assert abs(at["softmax_scale"] - a.softmax_scale) == 0 and at["yarn"] == int(a.yarn)
            assert np.array_equal(c["rope/inv_freq"][()], __import__("mla_ref").rope.inv_freq(a))
            assert at["n_steps"] >= 5 and len(c["steps"]) == at["n_steps"]
            for k in range(int(at["n_steps"])):
                st = c["steps"][str(k)]
                s = st["x"].shape[1]
                assert (s > 1) == (k == 0) and st["x"].attrs["start_pos"] == (0 if k == 0 else c["steps/0/x"].shape[1] + k - 1)
                for p in layer.PIPELINES:
                    for fm in layer.FORMS:
                        assert st[p][fm]["out"].shape == st["x"].shape
            if at["inputs_stored"] == 0:
                assert "generated" in c and "weights" not in c


def test_full_layer_tiny_recomputes():
    with h5py.File(os.path.join(GOLDENS, "full_layer.h5"), "r") as f:
        c = f["cases/tiny_qlora_yarn"]
        a = config.preset(c.attrs["preset"])
        w = {k: numerics.bf16_bits_to_f64(v[()]) for k, v in c["weights"].items()}
        steps = [(numerics.bf16_bits_to_f64(c["steps"][str(k)]["x"][()]), int(c["steps"][str(k)]["x"].attrs["start_pos"]))
                 for k in range(int(c.attrs["n_steps"]))]
        out, inter, caches = layer.run_steps(a, w, steps)
        for k in range(len(steps)):
            for fm in layer.FORMS:
                t = c["steps"][str(k)]["fp64"][fm]["out"][()]
                assert np.abs(out[(k, "fp64", fm)] - t).max() <= T.CHECK_TRUTH_REL * np.abs(t).max()
                b16 = numerics.bf16_bits_to_f64(c["steps"][str(k)]["bf16"][fm]["out"][()])
                assert np.abs(out[(k, "bf16", fm)] - b16).max() <= T.CHECK_BF16_REL * np.abs(b16).max()
        for fm in layer.FORMS:
            for n, v in caches[("fp64", fm)].items():
                assert np.allclose(c["final_cache/fp64"][fm][n][()], v, rtol=1e-12, atol=1e-14)


def test_generated_weights_sha256():
    with h5py.File(os.path.join(GOLDENS, "full_layer.h5"), "r") as f:
        g = f["cases/v2_lite/generated"]
        ga = g["weights_wkv_b"].attrs
        t = generator.GeneratedTensor(ga["seed"], ga["stream"], ga["shape"], ga["dtype"], ga["mean"], ga["std"])
        assert t.sha256() == ga["sha256"]
        assert sorted(g) == sorted("weights_" + n for n in layer.weight_names(config.preset("v2-lite")))


def test_cache_boundary_file():
    with h5py.File(os.path.join(GOLDENS, "cache_boundary.h5"), "r") as f:
        for cname, c in f["cases"].items():
            M = int(c.attrs["max_seq_len"])
            assert c.attrs["kind"] == "cache_boundary" and c.attrs["expected_error"] == "cache capacity exceeded"
            assert c["steps/0/x"].shape[1] == M - 1 and c["steps/0/x"].attrs["start_pos"] == 0
            assert c["accept/x"].attrs["start_pos"] == M - 1 and c["reject/x"].attrs["start_pos"] == M
            assert c["accept/fp64/absorbed/out"].shape == c["accept/x"].shape


# ---------------------------------------------------------------- FP8 recipes in the catalog

def _fp8_cases(prefix):
    out = {}
    name = "attn_fp8.h5" if prefix == "fp8_tiny_" else "attn_sparse.h5"
    with h5py.File(os.path.join(GOLDENS, name), "r") as f:
        for cname, c in f["cases"].items():
            if cname.startswith(prefix):
                out[(c.attrs["fp8_recipe"], c.attrs["scale_fmt"])] = (
                    c["inputs/kv_cache_bf16"][()], c["inputs/kv_cache"][()], _used(c))
    return out


@pytest.mark.parametrize("prefix", ["fp8_tiny_", "sparse_fp8_tiny_"])
def test_fp8_recipe_cases_differ_exactly_where_the_recipes_do(prefix):
    """The same bf16 cache under both recipes: byte for byte equal on every block whose amax is at
    or above the crossover, different on every block below it — and such blocks exist, all-zero
    ones and both sides of both crossovers included."""
    cases = _fp8_cases(prefix)
    assert sorted(cases) == sorted((r, f) for r in numerics.FP8_RECIPES for f in numerics.SCALE_FMTS)
    for fmt in numerics.SCALE_FMTS:
        (src_a, kv_a, used), (src_b, kv_b, _) = cases[("deepseek_v32", fmt)], cases[("flashmla", fmt)]
        assert np.array_equal(src_a, src_b)
        lat = numerics.bf16_bits_to_f64(src_a[used])[:, :512].reshape(-1, 4, 128)
        amax = np.abs(lat).max(-1)  # [tokens, 4]
        differ = numerics.fp8_recipes_differ(amax, fmt)
        ta, tb = kv_a[used], kv_b[used]
        codes_differ = (ta[:, :512].reshape(-1, 4, 128) != tb[:, :512].reshape(-1, 4, 128)).any(-1)
        scales_differ = (ta[:, 512:528].reshape(-1, 4, 4) != tb[:, 512:528].reshape(-1, 4, 4)).any(-1)
        assert np.array_equal(scales_differ, differ), fmt
        assert not codes_differ[~differ].any() and np.array_equal(ta[:, 528:], tb[:, 528:])
        assert differ.sum() >= 4 and (~differ).sum() >= 4
        assert (amax[differ] == 0).any(), "an all-zero block"
        # both sides of this format's crossover are present
        edge = 0.02734375 if fmt == "ue8m0" else 0.0448
        assert (amax[differ] > edge * 0.99).any() and (amax[~differ] < edge * 1.01).any()
        for recipe in numerics.FP8_RECIPES:
            src, kv, _ = cases[(recipe, fmt)]
            vals = numerics.bf16_bits_to_f64(src[used])
            assert np.array_equal(numerics.fp8_quantize(vals[:, :512], vals[:, 512:], fmt, recipe), kv[used])


# ---------------------------------------------------------------- needles and long cases

LONG_CASES = ("long_32k", "long_65537", "long_128k")


def test_long_cases_guard_against_over_reads():
    """Every long case: needles, permuted pages, poisoned spare blocks, and at least one has
    several sequences and a last page with a single token (reading past its end hits poison)."""
    multi = partial = False
    with h5py.File(os.path.join(GOLDENS, "attn_stress.h5"), "r") as f:
        assert set(LONG_CASES) <= set(f["cases"])
        for cname, c in f["cases"].items():
            sl = c["inputs/cache_seqlens"][()]
            if sl.max() < 16384:
                continue
            assert cname in LONG_CASES
            assert c["needles"].attrs["rule"] == needles.RULE, cname
            used = _used(c)
            assert (~used.any(-1)).sum() >= 2, f"{cname}: poisoned spare blocks"
            bt = c["inputs/block_table"][()]
            first = bt[0, :-(-int(sl[0]) // 64)]
            assert not np.array_equal(first, np.sort(first)), f"{cname}: pages permuted"
            multi |= len(sl) > 1
            partial |= bool((sl % int(c.attrs["page_size"]) != 0).any())
    assert multi and partial


def test_needles_follow_the_rule():
    """The stored overlay is SCHEMA.md's rule, rederived here from its text, and the stored truth
    shows it: in every needle head the output at each needle's latent dim is B / (needles in its
    slot), in [2, 8); background heads are ordinary."""
    with h5py.File(os.path.join(GOLDENS, "attn_stress.h5"), "r") as f:
        for cname in LONG_CASES:
            c = f["cases"][cname]
            at, g = c.attrs, c["needles"]
            h, ps = int(at["heads"]), int(at["page_size"])
            sl = c["inputs/cache_seqlens"][()]
            pos = g["positions"][()]
            kv = numerics.bf16_bits_to_f64(g["kv"][()])
            alpha = g.attrs["alpha"]
            assert alpha == 2.0 ** np.ceil(np.log2(alpha)) and alpha * at["softmax_scale"] > 64
            out = c["truth/out"][()]
            for i, L in enumerate(sl):
                L = int(L)
                want = [t for t in range(L) if t % 64 in (0, 63) or t % ps in (0, ps - 1) or t == L - 1]
                mine = pos[pos[:, 0] == i, 1]
                assert mine.tolist() == want, (cname, i)
                n = len(want)
                S = max(1, min(64, (h + 1) // 2, n // 2))
                R = -(-n // S)
                B = 2.0 ** np.ceil(np.log2(2 * R))
                toks = kv[pos[:, 0] == i]
                for k, tok in enumerate(toks):
                    nz = np.flatnonzero(tok)
                    assert nz.tolist() == [k // S, 512 + k % S] and tok[k // S] == B and tok[512 + k % S] == alpha
                mask = g["q_mask"][i].astype(bool)
                assert np.flatnonzero(mask).tolist() == list(range(R)) + list(range(512, 512 + S))
                for hh in range(0, h, 2):
                    s = (hh // 2) % S
                    n_slot = len(range(s, n, S))
                    dims = [k // S for k in range(s, n, S)]
                    got = out[i, 0, hh, dims]
                    np.testing.assert_allclose(got, B / n_slot, rtol=1e-12)
                    assert 2 <= B / n_slot < 8 or n_slot == 1
