"""The indexer family on disk: each step's stored stages are what mla_ref.indexer computes from the
case's seed, one stage from the previous one; the cache a decode step scores is the prompt's keys
plus its own; the two RoPE layouts and the two scale formats lead to different selections on the
same inputs (so a kernel of the wrong convention cannot pass both); and the catalog stays in its
budget."""
import os

import h5py
import numpy as np
import pytest

from catalog_dir import GOLDENS
from mla_ref import indexer, indexer_cases, numerics

INDEXER = os.path.join(GOLDENS, "indexer.h5")
pytestmark = pytest.mark.skipif(not os.path.exists(INDEXER), reason="no indexer goldens (run: ./mla.sh goldens)")
CATALOG_BUDGET = 40 << 20  # bytes: the committed catalog's ceiling (README, "Golden families")


def _cases():
    with h5py.File(INDEXER, "r") as f:
        return list(f["cases"])


def _spec(c):
    a = c.attrs
    steps = c["steps"]
    return indexer_cases.IndexerSpec(
        "x", "x", preset=a["preset"], batch=int(a["batch"]), prompt=int(steps["0"].attrs["seqlen"]),
        decode_steps=int(a["n_steps"]) - 1, rope_layout=a["rope_layout"], scale_fmt=a["scale_fmt"], seed=int(a["seed"]))


@pytest.mark.parametrize("name", _cases())
def test_each_stage_follows_from_the_previous_one(name):
    with h5py.File(INDEXER, "r") as f:
        # The deployed logits are float32 sums in the order of torch's build and of the BLAS it
        # calls (Debian's torch takes whatever libblas.so.3 the system provides), which the file
        # does not record: within a few float32 ulps of each row's largest logit, wherever it runs.
        c = f["cases"][name]
        spec = _spec(c)
        codes, scales = [], []
        for k in range(int(c.attrs["n_steps"])):
            st = c["steps"][str(k)]
            q = numerics.bf16_bits_to_f64(st["q"][()])
            kk = numerics.bf16_bits_to_f64(st["k"][()])
            # act_quant of the stored bf16 q and k gives the stored codes and scales
            for x, cn, sn in ((q, "q_codes", "q_scale"), (kk, "k_codes", "k_scale")):
                qc, qs = numerics.act_quant(x, spec.scale_fmt)
                assert np.array_equal(qc, st[cn][()]) and np.array_equal(qs[..., 0], st[sn][()]), (k, cn)
            codes.append(st["k_codes"][()])
            scales.append(st["k_scale"][()])
            cache_codes, cache_scales = np.concatenate(codes, axis=1), np.concatenate(scales, axis=1)
            mask = indexer.causal_mask(int(st.attrs["seqlen"]), int(st.attrs["start_pos"]))
            truth = indexer.logits_truth(st["q_codes"][()], st["weights"][()], cache_codes, cache_scales)
            dep = indexer.logits_deployed(st["q_codes"][()], st["weights"][()], cache_codes, cache_scales)
            assert np.array_equal(indexer_cases.masked(truth, mask), st["logits_truth"][()])
            dep = indexer_cases.masked(dep, mask).astype(np.float32)
            stored = st["logits_deployed"][()].astype(np.float64)
            fin = np.isfinite(stored)
            assert np.array_equal(fin, np.isfinite(dep))
            scale = np.max(np.where(fin, np.abs(stored), 0), axis=-1, keepdims=True)
            diff = np.zeros_like(stored)
            diff[fin] = dep[fin] - stored[fin]
            assert np.all(np.abs(diff) <= 2.0 ** -20 * scale)
            top = indexer.topk(truth, int(c.attrs["index_topk"]), mask)
            assert np.array_equal(indexer_cases.padded_indices(top), st["topk_truth"][()])
            assert np.array_equal(top.n_valid, st["n_valid"][()])
            # -1 exactly past each row's valid count; the valid part never names a masked position
            idx, nv = st["topk_truth"][()], st["n_valid"][()]
            kk_ = idx.shape[-1]
            assert np.array_equal(idx < 0, np.arange(kk_)[None, None, :] >= nv[..., None])
            start = int(st.attrs["start_pos"])
            for i in range(idx.shape[1]):
                assert idx[:, i].max() <= start + i  # causal: row i sees positions 0 .. start + i


@pytest.mark.parametrize("name", _cases())
def test_the_stored_steps_are_what_the_reference_computes_from_the_seed(name):
    with h5py.File(INDEXER, "r") as f:
        # The bf16 projections go through float32 BLAS products, whose last bits depend on the
        # summation order of torch's build and of the BLAS it calls (not recorded in the file):
        # within one bf16 ulp (2^-7 relative), and the float32 weights within a few float32 ulps of
        # each row's largest (`goldens check` says the same of the files).
        c = f["cases"][name]
        _, _, steps = indexer_cases.run_case(_spec(c))
        for k, (_, _, pos, s, st) in enumerate(steps):
            node = c["steps"][str(k)]
            assert (node.attrs["start_pos"], node.attrs["seqlen"]) == (pos, s)
            stored = numerics.bf16_bits_to_f64(node["q"][()])
            assert np.all(np.abs(st.projected.q - stored) <= 2.0 ** -7 * np.abs(stored))
            w, w_stored = st.quantized.weights.astype(np.float64), node["weights"][()].astype(np.float64)
            assert w.shape == w_stored.shape
            assert np.all(np.abs(w - w_stored) <= 2.0 ** -20 * np.max(np.abs(w_stored), axis=-1, keepdims=True))


def test_layouts_and_formats_change_the_selection():
    with h5py.File(INDEXER, "r") as f:
        cs = f["cases"]

        def get(name, ds, step="0"):
            return cs[name]["steps"][step][ds][()]

        for fmt in ("ue8m0", "fp32"):
            a, b = f"tiny_interleaved_{fmt}", f"tiny_half_{fmt}"
            assert cs[a].attrs["seed"] == cs[b].attrs["seed"]  # the same inputs
            assert not np.array_equal(get(a, "topk_truth"), get(b, "topk_truth"))
            assert not np.array_equal(get(a, "topk_truth", "1"), get(b, "topk_truth", "1"))
        for layout in ("interleaved", "half"):
            a, b = f"tiny_{layout}_ue8m0", f"tiny_{layout}_fp32"
            assert np.array_equal(get(a, "q"), get(b, "q"))  # the same projection
            assert not np.array_equal(get(a, "k_codes"), get(b, "k_codes"))
            assert np.all(np.log2(get(a, "k_scale")) == np.round(np.log2(get(a, "k_scale"))))  # ue8m0: 2^e


def test_rows_with_fewer_valid_positions_than_k_and_rows_with_more_are_both_stored():
    with h5py.File(INDEXER, "r") as f:
        for name in f["cases"]:
            c = f["cases"][name]
            k = int(c.attrs["index_topk"])
            nv = np.concatenate([c["steps"][s]["n_valid"][()].ravel() for s in c["steps"]])
            assert (nv < k).any() and (nv > k).any(), name


def test_the_catalog_stays_within_its_budget():
    total = sum(os.path.getsize(os.path.join(GOLDENS, n)) for n in os.listdir(GOLDENS))
    assert total <= CATALOG_BUDGET, f"fixtures/goldens holds {total} bytes, over the {CATALOG_BUDGET}-byte budget"
