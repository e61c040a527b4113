"""FlashMLA's sparse prefill in the reference (mla_ref.sparse_prefill): against a plain loop over
Python floats, against the decode core's sparse attention on the same keys, and its conventions
one by one: every kind of invalid index, topk_length, the attention sink, duplicates, rows with no
key, the natural-log lse, the deployed precision, and the refusals."""
import math

import numpy as np
import pytest

from mla_ref import attention, numerics
from mla_ref import sparse_prefill as SP

INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def _inputs(seed=3, s_q=4, h=3, s_kv=40, topk=8, d_qk=576, std=1.0):
    rng = np.random.default_rng(seed)
    q = numerics.round_bf16_np(rng.standard_normal((s_q, h, d_qk)) * std)
    kv = numerics.round_bf16_np(rng.standard_normal((s_kv, d_qk)))
    idx = np.stack([rng.permutation(s_kv)[:topk] for _ in range(s_q)]).astype(np.int32)
    return q, kv, idx


def _plain(q, kv, idx, scale, d_v, sink=None, topk_length=None):
    """The module doc's formulas, one row and head at a time, in Python floats (math.fsum)."""
    s_q, h, _ = q.shape
    out = np.zeros((s_q, h, d_v))
    mx = np.full((s_q, h), -math.inf)
    lse = np.full((s_q, h), math.inf)
    for i in range(s_q):
        keys = [int(t) for j, t in enumerate(idx[i]) if 0 <= t < kv.shape[0]
                and (topk_length is None or j < topk_length[i])]
        if not keys:
            continue
        for hh in range(h):
            s = [scale * math.fsum(q[i, hh] * kv[t]) for t in keys]
            m = max(s)
            e = [math.exp(x - m) for x in s]
            tot = math.fsum(e)
            den = tot + (0.0 if sink is None else math.exp(sink[hh] - m))
            for d in range(d_v):
                out[i, hh, d] = math.fsum(w * kv[t, d] for w, t in zip(e, keys)) / den
            mx[i, hh] = m
            lse[i, hh] = m + math.log(tot)
    return out, mx, lse


def _close(a, b, rel):
    a, b = np.asarray(a), np.asarray(b)
    assert np.array_equal(np.isinf(a), np.isinf(b)) and np.array_equal(np.isnan(a), np.isnan(b))
    fin = np.isfinite(b)
    assert np.abs(a[fin] - b[fin]).max(initial=0) <= rel * max(np.abs(b[fin]).max(initial=0), 1.0)


def test_matches_a_plain_loop_with_every_kind_of_invalid_index_topk_length_and_a_sink():
    q, kv, idx = _inputs(d_qk=576)
    idx[0, 1], idx[0, 3], idx[1, 0], idx[1, 7] = -1, INT32_MIN, kv.shape[0], INT32_MAX
    idx[2, :] = -1  # a row with no key
    tl = np.array([8, 5, 8, 3])
    sink = np.array([0.5, -2.0, 3.0])
    scale = 576 ** -0.5
    for kw in ({}, {"topk_length": tl}, {"attn_sink": sink}, {"topk_length": tl, "attn_sink": sink}):
        got = SP.sparse_prefill(q, kv, idx, scale, **kw)
        want = _plain(q, kv, idx, scale, SP.D_V, kw.get("attn_sink"), kw.get("topk_length"))
        for g, w in zip(got, want):
            _close(g, w, 1e-13)


def test_d_qk_512_and_a_smaller_d_v():
    q, kv, idx = _inputs(d_qk=512, s_q=2)
    got = SP.sparse_prefill(q, kv, idx, 0.1, d_v=256)
    want = _plain(q, kv, idx, 0.1, 256)
    assert got[0].shape == (2, 3, 256)
    for g, w in zip(got, want):
        _close(g, w, 1e-13)


def test_equals_the_decode_cores_sparse_attention_on_the_same_keys():
    q, kv, idx = _inputs(s_q=3, h=4, s_kv=64, topk=16)
    idx[1, 2] = -1
    idx[2, 5] = 64  # past the cache: invalid in both conventions
    scale = 0.07
    out, _, lse = SP.sparse_prefill(q, kv, idx, scale)
    # One sequence of s_kv tokens on one page; the decode core's rows are its s_q queries.
    d_out, d_lse = attention.attention(q[None], kv[None], np.zeros((1, 1), np.int32), np.array([64], np.int32), scale,
                                       indices=idx[None])
    _close(out, d_out[0], 1e-14)
    _close(lse, d_lse[0].T, 1e-14)


def test_a_row_with_no_key_is_out_0_max_minus_inf_lse_plus_inf_whatever_the_sink():
    q, kv, idx = _inputs(s_q=3)
    idx[0] = -1
    idx[1] = INT32_MAX
    for kw in ({}, {"attn_sink": np.array([1.0, 100.0, -np.inf])}, {"topk_length": np.array([8, 8, 0])}):
        out, mx, lse = SP.sparse_prefill(q, kv, idx, 0.05, **kw)
        rows = [0, 1, 2] if "topk_length" in kw else [0, 1]
        assert np.all(out[rows] == 0) and np.all(np.isneginf(mx[rows])) and np.all(np.isposinf(lse[rows]))
        if "topk_length" not in kw:
            assert np.all(np.isfinite(lse[2]))


def test_the_sink_shrinks_out_and_leaves_lse_and_max_logits():
    q, kv, idx = _inputs()
    sink = np.array([0.0, 1.5, -np.inf])
    o0, m0, l0 = SP.sparse_prefill(q, kv, idx, 0.05)
    o1, m1, l1 = SP.sparse_prefill(q, kv, idx, 0.05, attn_sink=sink)
    assert np.array_equal(m0, m1) and np.array_equal(l0, l1)
    shrink = 1.0 / (1.0 + np.exp(sink[None, :] - l0))  # FlashMLA's decode-side form of the same rule
    _close(o1, o0 * shrink[..., None], 1e-14)
    assert np.array_equal(o1[:, 2], o0[:, 2])  # a -inf sink takes nothing
    assert np.all(SP.sparse_prefill(q, kv, idx, 0.05, attn_sink=np.full(3, np.inf))[0] == 0)


def test_an_index_given_twice_is_attended_twice():
    q, kv, idx = _inputs(s_q=1, topk=4)
    once = SP.sparse_prefill(q, kv, idx[:, :1], 0.05)
    twice = SP.sparse_prefill(q, kv, np.repeat(idx[:, :1], 2, axis=1), 0.05)
    _close(twice[0], once[0], 1e-15)
    _close(twice[2], once[2] + math.log(2.0), 1e-15)
    # and it is not the same as attending it once beside another key
    mixed = SP.sparse_prefill(q, kv, idx[:, :2], 0.05)
    assert not np.allclose(mixed[0], once[0])


def test_topk_length_is_the_same_as_writing_minus_one_past_it():
    q, kv, idx = _inputs()
    tl = np.array([0, 1, 7, 8])
    cut = idx.copy()
    cut[np.arange(8)[None, :] >= tl[:, None]] = -1
    for a, b in zip(SP.sparse_prefill(q, kv, idx, 0.05, topk_length=tl), SP.sparse_prefill(q, kv, cut, 0.05)):
        assert np.array_equal(a, b)


def test_bugs_the_reference_tells_apart():
    q, kv, idx = _inputs()
    idx[:, 0] = -1
    scale = 0.05
    out, _, lse = SP.sparse_prefill(q, kv, idx, scale)
    # -1 read as key 0 (a clamp instead of a mask)
    out0, _, lse0 = SP.sparse_prefill(q, kv, np.maximum(idx, 0), scale)
    assert np.abs(out0 - out).max() > 1e-3 and np.abs(lse0 - lse).max() > 1e-3
    # the lse is natural: log2 of the same sum differs by a factor 1/ln 2
    assert np.abs(lse / math.log(2.0) - lse).max() > 0.1
    s = np.array([[scale * float(np.dot(q[i, hh], kv[t])) for t in idx[i] if t >= 0] for i in range(4) for hh in range(3)])
    np.testing.assert_allclose(lse.reshape(-1), np.log(np.exp(s).sum(axis=1)), rtol=1e-13)


def test_the_deployed_precision_is_near_the_truth_with_the_same_infinities():
    q, kv, idx = _inputs(s_q=4, h=8, s_kv=300, topk=64, std=3.0)
    idx[3] = -1
    t = SP.sparse_prefill(q, kv, idx, 576 ** -0.5, attn_sink=np.linspace(-1, 1, 8))
    d = SP.sparse_prefill(q, kv, idx, 576 ** -0.5, attn_sink=np.linspace(-1, 1, 8), precision="same_dtype")
    assert np.array_equal(numerics.round_bf16_np(d[0]), d[0])  # out is bf16
    _close(d[0], t[0], 2.0 ** -6)
    _close(d[1], t[1], 2.0 ** -20)
    _close(d[2], t[2], 2.0 ** -20)


def test_refusals_name_what_is_wrong():
    q, kv, idx = _inputs()
    with pytest.raises(ValueError, match="d_qk 100"):
        SP.sparse_prefill(q[..., :100], kv[:, :100], idx, 0.1)
    with pytest.raises(ValueError, match="kv must be"):
        SP.sparse_prefill(q, kv[:, :512], idx, 0.1)
    with pytest.raises(ValueError, match="indices must be"):
        SP.sparse_prefill(q, kv, idx[:2], 0.1)
    with pytest.raises(ValueError, match="integers"):
        SP.sparse_prefill(q, kv, idx.astype(np.float64), 0.1)
    with pytest.raises(ValueError, match="d_v 600"):
        SP.sparse_prefill(q, kv, idx, 0.1, d_v=600)
    with pytest.raises(ValueError, match="attn_sink"):
        SP.sparse_prefill(q, kv, idx, 0.1, attn_sink=np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match="topk_length"):
        SP.sparse_prefill(q, kv, idx, 0.1, topk_length=np.array([9, 0, 0, 0]))
    with pytest.raises(ValueError, match="precision"):
        SP.sparse_prefill(q, kv, idx, 0.1, precision="fp8")
    # FlashMLA's own shapes, with the singleton kv-head dimensions, are taken as they are
    a = SP.sparse_prefill(q, kv[:, None], idx[:, None], 0.1)
    b = SP.sparse_prefill(q, kv, idx, 0.1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
