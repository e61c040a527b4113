import numpy as np
import pytest

from mla_ref import config, generator, layer, numerics
from mla_ref import merge as M
from mla_ref import prefill as P
from mla_ref import tolerances as T

D_QK, D_V = 192, 128


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def _bf16(seed, stream, shape, std=1.0):
    return numerics.bf16_bits_to_f64(generator.uniform_bf16_bits(seed, stream, shape, 0.0, std))


# ---------------------------------------------------------------- planted bugs (never in the module)

def _top_left_valid(s_q, s_k):
    return np.arange(s_k)[None, :] <= np.arange(s_q)[:, None]


def _merge_empty_as_zero(out_a, lse_a, out_b, lse_b, *args, **kw):
    """An empty side's lse taken as 0 (a finite state of weight e^0) instead of 'empty'."""
    z = lambda l: np.where(np.isinf(l), 0.0, l)
    return M.merge_states(out_a, z(lse_a), out_b, z(lse_b), *args, **kw)


def _identity(lse):
    return lse


# ---------------------------------------------------------------- context chunk + causal part == one call

def _split_error(q, k, v, pairs, scale, merge=M.merge_states, lse_fed=_identity):
    """Each sequence (s_q, s_k) of the packed q, k, v: a non-causal context chunk over its first
    s_k - s_q keys (kv_len 0 when s_k == s_q) and a causal part over its last s_q keys, merged,
    vs the one-call causal prefill. `lse_fed` maps the partial lse before it reaches `merge`.
    Returns (out, lse) relative errors."""
    cu_q = np.concatenate([[0], np.cumsum([p[0] for p in pairs])]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum([p[1] for p in pairs])]).astype(np.int32)
    out, lse = P.prefill_attention(q, k, v, cu_q, cu_k, True, scale)
    ctx = np.concatenate([np.arange(cu_k[i], cu_k[i + 1] - s_q) for i, (s_q, _) in enumerate(pairs)]).astype(np.int64)
    tail = np.concatenate([np.arange(cu_k[i + 1] - s_q, cu_k[i + 1]) for i, (s_q, _) in enumerate(pairs)]).astype(np.int64)
    cu_c = np.concatenate([[0], np.cumsum([p[1] - p[0] for p in pairs])]).astype(np.int32)
    o_c, l_c = P.prefill_attention(q, k[ctx], v[ctx], cu_q, cu_c, False, scale)
    o_t, l_t = P.prefill_attention(q, k[tail], v[tail], cu_q, cu_q, True, scale)
    o_m, l_m = merge(o_c, lse_fed(l_c), o_t, lse_fed(l_t))
    return _rel(o_m, out), np.abs(l_m - lse).max() / np.abs(lse).max()


PAIRS = [(3, 7), (4, 4), (1, 65), (64, 127), (63, 63), (1, 1)]  # (4, 4), (63, 63), (1, 1): context kv_len 0


def _random_split_case(h, seed, q_std=1.0):
    q = _bf16(seed, 1, (sum(p[0] for p in PAIRS), h, D_QK), q_std)
    k = _bf16(seed, 2, (sum(p[1] for p in PAIRS), h, D_QK))
    v = _bf16(seed, 3, (sum(p[1] for p in PAIRS), h, D_V))
    return q, k, v


@pytest.mark.parametrize("h", [1, 3])
@pytest.mark.parametrize("q_std", [1.0, 100.0])
def test_split_and_merge_equals_one_call(h, q_std):
    q, k, v = _random_split_case(h, 20 + h, q_std)
    e_out, e_lse = _split_error(q, k, v, PAIRS, 0.07)
    assert e_out <= T.PREFILL_SPLIT_MERGE_FP64_REL and e_lse <= T.PREFILL_SPLIT_MERGE_FP64_REL


def test_split_and_merge_on_layer_inputs():
    """The layer's own q, k, v (tiny preset): 7 tokens, the last 3 queries; and 3 over 3 (kv_len 0)."""
    a = config.preset("tiny")
    w = {n: g.values() for n, g in layer.weight_generators(a, 4).items()}
    q, k, v = P.mha_inputs(a, w, layer.x_generator(a, 4, 0, 2, 7).values())
    qs = np.concatenate([q[0, 4:], q[1, 4:]])
    e_out, e_lse = _split_error(qs, k.reshape(14, a.n_heads, -1), v.reshape(14, a.n_heads, -1), [(3, 7), (3, 7)],
                                a.softmax_scale)
    assert e_out <= T.PREFILL_SPLIT_MERGE_FP64_REL and e_lse <= T.PREFILL_SPLIT_MERGE_FP64_REL
    e_out, e_lse = _split_error(q[0, 4:], k[0, 4:], v[0, 4:], [(3, 3)], a.softmax_scale)
    assert e_out <= T.PREFILL_SPLIT_MERGE_FP64_REL and e_lse <= T.PREFILL_SPLIT_MERGE_FP64_REL


def test_planted_top_left_causal_fails_split(monkeypatch):
    q, k, v = _random_split_case(3, 23)
    monkeypatch.setattr(P, "_causal_valid", _top_left_valid)
    e_out, e_lse = _split_error(q, k, v, PAIRS, 0.07)
    assert e_out > T.PREFILL_SPLIT_MERGE_FP64_REL and e_lse > T.PREFILL_SPLIT_MERGE_FP64_REL


def test_planted_base2_lse_fed_as_natural_fails_split():
    q, k, v = _random_split_case(3, 23)
    e_out, e_lse = _split_error(q, k, v, PAIRS, 0.07, lse_fed=P.lse_to_base2)
    assert e_out > T.PREFILL_SPLIT_MERGE_FP64_REL and e_lse > T.PREFILL_SPLIT_MERGE_FP64_REL


def test_planted_empty_as_zero_fails_split():
    q, k, v = _random_split_case(3, 23)
    e_out, e_lse = _split_error(q, k, v, PAIRS, 0.07, merge=_merge_empty_as_zero)
    assert e_out > T.PREFILL_SPLIT_MERGE_FP64_REL and e_lse > T.PREFILL_SPLIT_MERGE_FP64_REL


# ---------------------------------------------------------------- edge cases

N, H, D = 5, 3, 16


def _state(seed, lse_lo=-3.0, lse_hi=3.0):
    out = _bf16(seed, 1, (N, H, D))
    lse = lse_lo + (lse_hi - lse_lo) * generator.uniform(seed, 2, (H, N), 0.5, 0.5 / 3 ** 0.5).clip(0, 1)
    return out, lse


def _edge_failures(merge):
    """Names of the edge cases `merge` gets wrong (truth arithmetic)."""
    bad = []
    oa, la = _state(1)
    ob, lb = _state(2)
    for name, empty in (("a empty +inf", np.inf), ("a empty -inf", -np.inf)):
        junk = np.full_like(oa, np.nan)  # an empty side's out is never read
        o, l = merge(junk, np.full_like(la, empty), ob, lb)
        if not (np.array_equal(o, ob) and np.array_equal(l, lb)):
            bad.append(name)
        o, l = merge(oa, la, junk, np.full_like(lb, empty))
        if not (np.array_equal(o, oa) and np.array_equal(l, la)):
            bad.append(name.replace("a ", "b "))
    for ea, eb in ((np.inf, np.inf), (-np.inf, -np.inf), (np.inf, -np.inf)):
        o, l = merge(oa, np.full_like(la, ea), ob, np.full_like(lb, eb))
        if not (np.all(o == 0) and np.all(np.isneginf(l))):
            bad.append(f"both empty {ea} {eb}")
    # 1000 apart: the smaller side's weight underflows to 0 (no overflow, no NaN)
    o, l = merge(oa, lb - 1000.0, ob, lb)
    if not (np.array_equal(o, ob) and np.array_equal(l, lb)):
        bad.append("lse 1000 apart")
    # large magnitudes on both sides: relative to the max, no exponential overflows
    big_a, big_b = la + 1e4, lb + 1e4
    o, l = merge(oa, big_a, ob, big_b)
    wa = 1.0 / (1.0 + np.exp(big_b - big_a))  # [h, n]
    want = oa * wa.T[..., None] + ob * (1 - wa.T[..., None])
    if not (np.allclose(o, want, rtol=1e-14, atol=1e-15) and np.allclose(l, np.logaddexp(big_a, big_b), rtol=1e-15)):
        bad.append("large lse")
    return bad


def test_edge_cases():
    assert _edge_failures(M.merge_states) == []


def test_planted_empty_as_zero_fails_edge_cases():
    bad = _edge_failures(_merge_empty_as_zero)
    assert "a empty +inf" in bad and "a empty -inf" in bad and any(b.startswith("both empty") for b in bad)


@pytest.mark.parametrize("out_dtype", M.OUT_DTYPES)
def test_deployed_arithmetic(out_dtype):
    oa, la = _state(3)
    ob, lb = _state(4)
    t_out, t_lse = M.merge_states(oa, la, ob, lb)
    o, l = M.merge_states(oa, la, ob, lb, out_dtype, "deployed")
    as_dtype = {"bf16": numerics.round_bf16_np, "fp16": lambda x: x.astype(np.float16).astype(np.float64),
                "fp32": lambda x: x.astype(np.float32).astype(np.float64)}[out_dtype]
    eps = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "fp32": 2.0 ** -24}[out_dtype]
    assert np.array_equal(o, as_dtype(o))  # the values of out_dtype
    assert _rel(o, t_out) <= 2 * eps + 1e-6  # one rounding of float32 arithmetic's result
    assert np.abs(l - t_lse).max() <= 1e-6 * np.abs(t_lse).max()
    for ea, eb in ((np.inf, np.inf), (-np.inf, np.inf)):  # both empty in every dtype: 0, -inf, no NaN
        o, l = M.merge_states(oa, np.full_like(la, ea), ob, np.full_like(lb, eb), out_dtype, "deployed")
        assert np.all(o == 0) and np.all(np.isneginf(l))
    o, l = M.merge_states(oa, lb - 1000.0, ob, lb, out_dtype, "deployed")
    assert np.isfinite(o).all() and np.array_equal(o, as_dtype(ob))


def test_symmetric_and_base2():
    oa, la = _state(5)
    ob, lb = _state(6)
    o, l = M.merge_states(oa, la, ob, lb)
    o2, l2 = M.merge_states(ob, lb, oa, la)
    assert np.array_equal(o, o2) and np.array_equal(l, l2)
    # FlashInfer's convention: base 2 in, base 2 out, the same merge
    ob2, lb2 = M.merge_states(oa, P.lse_to_base2(la), ob, P.lse_to_base2(lb), base="2")
    assert np.allclose(ob2, o, rtol=1e-14, atol=1e-15) and np.allclose(P.lse_from_base2(lb2), l, rtol=1e-14)


def test_bad_arguments():
    oa, la = _state(7)
    with pytest.raises(ValueError, match="lse is NaN"):
        M.merge_states(oa, np.full_like(la, np.nan), oa, la)
    with pytest.raises(ValueError, match=r"out must be \[n, h, d\] and lse \[h, n\]"):
        M.merge_states(oa, la.T, oa, la.T)
    with pytest.raises(ValueError, match="unknown out_dtype"):
        M.merge_states(oa, la, oa, la, "fp8")
