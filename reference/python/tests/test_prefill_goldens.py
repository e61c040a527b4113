"""The prefill and merge families on disk: every case's stored results are what mla_ref.prefill /
mla_ref.merge compute from its stored (or regenerated) inputs, and the needles do what
fixtures/SCHEMA.md says they do."""
import os

import h5py
import numpy as np
import pytest

from catalog_dir import GOLDENS
from mla_ref import generator, merge, numerics, prefill, prefill_cases
from mla_ref import tolerances as T

PREFILL = os.path.join(GOLDENS, "prefill.h5")
MERGE = os.path.join(GOLDENS, "merge.h5")
pytestmark = pytest.mark.skipif(not os.path.exists(PREFILL) or not os.path.exists(MERGE),
                                reason="no prefill/merge goldens (run: ./mla.sh goldens)")


def _input(c, name):
    if c.attrs["inputs_stored"]:
        return numerics.bf16_bits_to_f64(c["inputs"][name][()])
    g = c["generated"][name].attrs
    gt = generator.GeneratedTensor(g["seed"], g["stream"], g["shape"], g["dtype"], g["mean"], g["std"])
    assert gt.sha256() == g["sha256"]
    return gt.values()


def _prefill_cases():
    with h5py.File(PREFILL, "r") as f:
        return list(f["cases"])


@pytest.mark.parametrize("name", _prefill_cases())
def test_prefill_truth_is_recomputed_from_the_inputs(name):
    with h5py.File(PREFILL, "r") as f:
        c = f["cases"][name]
        q, k, v = (_input(c, n) for n in ("q", "k", "v"))
        cu_q, cu_k = c["inputs/cu_seqlens_q"][()], c["inputs/cu_seqlens_k"][()]
        a = c.attrs
        assert q.shape == (a["total_q"], a["heads"], a["d_qk"]) and v.shape == (a["total_k"], a["heads"], a["d_v"])
        out, lse = prefill.prefill_attention(q, k, v, cu_q, cu_k, bool(a["causal"]), a["softmax_scale"], "fp64")
        np.testing.assert_array_equal(np.isinf(lse), np.isinf(c["truth/lse"][()]))
        fin = np.isfinite(lse)
        assert np.abs(lse[fin] - c["truth/lse"][()][fin]).max(initial=0) <= T.CHECK_TRUTH_REL * np.abs(lse[fin]).max(initial=1)
        assert np.abs(out - c["truth/out"][()]).max() <= T.CHECK_TRUTH_REL * np.abs(out).max()
        sd = numerics.bf16_bits_to_f64(c["same_dtype/out"][()])
        assert np.abs(sd - out).max() <= 2.0 ** -6 * np.abs(out).max()  # the bf16 pipeline is near the truth


def test_prefill_needles_share_each_needle_heads_weight():
    with h5py.File(PREFILL, "r") as f:
        c = f["cases/needles_diagonal"]
        pos = c["needles/positions"][()]
        spike = c["needles"].attrs["spike"]
        cu_q, cu_k = c["inputs/cu_seqlens_q"][()], c["inputs/cu_seqlens_k"][()]
        out = c["truth/out"][()]
        for i in range(len(cu_q) - 1):
            s_q, s_k = cu_q[i + 1] - cu_q[i], cu_k[i + 1] - cu_k[i]
            mine = pos[pos[:, 0] == i, 1]
            np.testing.assert_array_equal(mine, prefill_cases.needle_positions(s_q, s_k, True))
            for j in range(s_q):
                seen = np.nonzero(mine <= s_k - s_q + j)[0]  # the needles row j attends (bottom-right)
                row = out[cu_q[i] + j, 0]  # head 0: a needle head
                np.testing.assert_allclose(row[seen], spike / len(seen), rtol=1e-12)
                # the diagonal key is a needle: a mask one key short or top-left aligned drops it
                assert len(seen) >= 1 and mine[seen[-1]] == s_k - s_q + j


def _merge_cases():
    with h5py.File(MERGE, "r") as f:
        return list(f["cases"])


@pytest.mark.parametrize("name", _merge_cases())
def test_merge_truth_is_recomputed_and_never_nan(name):
    with h5py.File(MERGE, "r") as f:
        c = f["cases"][name]
        dt = {v: k for k, v in prefill_cases.MERGE_DTYPES.items()}[c.attrs["out_dtype"]]

        def widen(ds):
            a = ds[()]
            if ds.attrs["dtype"] == "bfloat16":
                return numerics.bf16_bits_to_f64(a)
            return (a.view(np.float16) if ds.attrs["dtype"] == "float16" else a).astype(np.float64)
        oa, ob = widen(c["inputs/out_a"]), widen(c["inputs/out_b"])
        la, lb = c["inputs/lse_a"][()].astype(np.float64), c["inputs/lse_b"][()].astype(np.float64)
        out, lse = merge.merge_states(oa, la, ob, lb, dt, "truth")
        assert not np.isnan(c["truth/out"][()]).any() and not np.isnan(c["truth/lse"][()]).any()
        assert not np.isnan(widen(c["same_dtype/out"])).any()
        # exp/log may differ in their last bit between torch versions
        np.testing.assert_allclose(lse, c["truth/lse"][()], rtol=1e-14, atol=0)
        np.testing.assert_allclose(out, c["truth/out"][()], rtol=1e-14, atol=1e-300)
