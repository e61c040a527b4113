import numpy as np
import pytest
import torch

from mla_ref import attention as A
from mla_ref import config, generator, layer, numerics
from mla_ref import prefill as P
from mla_ref import tolerances as T

D_QK, D_V = 192, 128


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def _weights(preset, seed):
    a = config.preset(preset)
    return a, {k: g.values() for k, g in layer.weight_generators(a, seed).items()}


def _bf16(seed, stream, shape, std=1.0):
    return numerics.bf16_bits_to_f64(generator.uniform_bf16_bits(seed, stream, shape, 0.0, std))


# ---------------------------------------------------------------- planted bugs (never in the module)

def _top_left_valid(s_q, s_k):
    """Causal mask aligned top-left: query i attends keys j <= i."""
    return np.arange(s_k)[None, :] <= np.arange(s_q)[:, None]


def _k_pe_per_head(k_nope, k_pe):
    """k_pe read with a head stride, as if it were [b, s, h, rope]: each head sees another token's."""
    b, s, h, _ = k_nope.shape
    idx = (np.arange(s)[:, None] * h + np.arange(h)[None, :]) % s  # [s, h]
    return torch.cat([k_nope, k_pe[:, torch.from_numpy(idx)]], dim=-1)


# ---------------------------------------------------------------- the full layer's prefill

def _layer_errors(a, w, x):
    """(attention out, lse, layer output) relative errors of prefill_attention over mha_inputs
    vs the layer's naive fp64 prefill of the same tokens."""
    b, s, _ = x.shape
    m = layer.MLA(a, w, "fp64", "naive", b)
    rec = {}
    y = m.forward(x, 0, rec).numpy()
    q, k, v = P.mha_inputs(a, w, x)
    h = a.n_heads
    cu = np.arange(b + 1, dtype=np.int32) * s
    out, lse = P.prefill_attention(q.reshape(b * s, h, -1), k.reshape(b * s, h, -1), v.reshape(b * s, h, -1),
                                   cu, cu, True, a.softmax_scale)
    want = rec["attn_out"].numpy()  # [b, s, h, v]
    e_out = _rel(out.reshape(want.shape), want)
    sc = rec["scores"].numpy()  # [b, s, h, t], masked with -inf
    mx = sc.max(-1)
    want_lse = mx + np.log(np.exp(sc - mx[..., None]).sum(-1))  # [b, s, h]
    e_lse = _rel(lse.T.reshape(b, s, h), want_lse)
    y2 = m.linear(torch.from_numpy(out.reshape(b, s, h * a.v_head_dim)), "wo").numpy()
    return e_out, e_lse, _rel(y2, y)


@pytest.mark.parametrize("preset", ["tiny", "tiny-noqlora-noyarn", "v2-lite"])
def test_layer_prefill_equals_mha_prefill(preset):
    a, w = _weights(preset, 7)
    s = 6 if preset.startswith("tiny") else 3
    x = layer.x_generator(a, 7, 0, 2, s).values()
    e_out, e_lse, e_y = _layer_errors(a, w, x)
    assert e_out <= T.CORE_VS_LAYER_FP64_REL and e_y <= T.CORE_VS_LAYER_FP64_REL
    assert e_lse <= T.CORE_VS_LAYER_FP64_REL


def test_planted_k_pe_per_head_fails_layer_check(monkeypatch):
    a, w = _weights("tiny", 7)
    x = layer.x_generator(a, 7, 0, 2, 6).values()
    monkeypatch.setattr(P, "_assemble_k", _k_pe_per_head)
    e_out, e_lse, e_y = _layer_errors(a, w, x)
    assert e_out > T.CORE_VS_LAYER_FP64_REL and e_lse > T.CORE_VS_LAYER_FP64_REL


# ---------------------------------------------------------------- absorbed decode core == MHA form

def _absorbed_errors(a, w, x, s_q):
    """The decode core (attention.py) on the absorbed layer's cache of x's tokens, for the last
    s_q queries, vs the MHA-form prefill of the same queries over the same keys: (out, lse)."""
    b, T_, _ = x.shape
    h, nope = a.n_heads, a.qk_nope_head_dim
    m = layer.MLA(a, w, "fp64", "absorbed", b)
    rec = {}
    m.forward(x, 0, rec)
    q_dec = np.concatenate([rec["q_absorbed"].numpy(), rec["q_pe"].numpy()], axis=-1)[:, T_ - s_q:]
    c = m.caches()
    logical = np.concatenate([c["kv_cache"], c["pe_cache"]], axis=-1)  # [b, T, 576]
    bt, _ = A.make_block_table([T_] * b, T_, np.arange(b))
    lat, lse_dec = A.attention(q_dec, logical, bt, np.full(b, T_, np.int32), a.softmax_scale, True)
    w_uv = w["wkv_b"].reshape(h, nope + a.v_head_dim, a.kv_lora_rank)[:, nope:]
    out_dec = np.einsum("bshc,hdc->bshd", lat, w_uv)  # [b, s_q, h, v]
    q, k, v = P.mha_inputs(a, w, x)
    cu_q = np.arange(b + 1, dtype=np.int32) * s_q
    cu_k = np.arange(b + 1, dtype=np.int32) * T_
    out, lse = P.prefill_attention(q[:, T_ - s_q:].reshape(b * s_q, h, -1), k.reshape(b * T_, h, -1),
                                   v.reshape(b * T_, h, -1), cu_q, cu_k, True, a.softmax_scale)
    lse_mha = lse.reshape(h, b, s_q).transpose(1, 0, 2)  # [b, h, s_q] as the core writes it
    return _rel(out.reshape(out_dec.shape), out_dec), _rel(lse_mha, lse_dec)


@pytest.fixture(scope="module")
def v2lite():
    return _weights("v2-lite", 5)


@pytest.mark.parametrize("s_q", [1, 3])
def test_absorbed_core_equals_mha_prefill(v2lite, s_q):
    a, w = v2lite
    x = layer.x_generator(a, 5, 0, 2, 6).values()
    e_out, e_lse = _absorbed_errors(a, w, x, s_q)
    assert e_out <= T.CORE_VS_LAYER_FP64_REL and e_lse <= T.CORE_VS_LAYER_FP64_REL


def test_planted_top_left_causal_fails_absorbed_check(v2lite, monkeypatch):
    a, w = v2lite
    x = layer.x_generator(a, 5, 0, 2, 6).values()
    monkeypatch.setattr(P, "_causal_valid", _top_left_valid)
    e_out, e_lse = _absorbed_errors(a, w, x, 3)
    assert e_out > T.CORE_VS_LAYER_FP64_REL and e_lse > T.CORE_VS_LAYER_FP64_REL


def test_planted_k_pe_per_head_fails_absorbed_check(v2lite, monkeypatch):
    a, w = v2lite
    x = layer.x_generator(a, 5, 0, 1, 6).values()
    monkeypatch.setattr(P, "_assemble_k", _k_pe_per_head)
    e_out, _ = _absorbed_errors(a, w, x, 1)
    assert e_out > T.CORE_VS_LAYER_FP64_REL


# ---------------------------------------------------------------- varlen against plain numpy

# (s_q, s_k): kv_len 0, no queries, s_k < s_q (first rows empty), the 63/64/65 edges
PAIRS = [(1, 0), (0, 5), (1, 1), (63, 64), (64, 64), (65, 63), (65, 65), (1, 65), (3, 1)]


def _varlen(h, seed, q_std=1.0, pairs=PAIRS):
    q = _bf16(seed, 1, (sum(p[0] for p in pairs), h, D_QK), q_std)
    k = _bf16(seed, 2, (sum(p[1] for p in pairs), h, D_QK))
    v = _bf16(seed, 3, (sum(p[1] for p in pairs), h, D_V))
    cu_q = np.concatenate([[0], np.cumsum([p[0] for p in pairs])]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum([p[1] for p in pairs])]).astype(np.int32)
    return q, k, v, cu_q, cu_k


def _numpy_prefill(q, k, v, cu_q, cu_k, causal, scale):
    """Row by row, plain float64: the oracle the varlen tests compare with."""
    out = np.zeros(q.shape[:2] + (v.shape[2],))
    lse = np.full((q.shape[1], q.shape[0]), np.inf)
    for i in range(len(cu_q) - 1):
        s_q, s_k = cu_q[i + 1] - cu_q[i], cu_k[i + 1] - cu_k[i]
        for r in range(s_q):
            n = min(s_k, s_k - s_q + r + 1) if causal else s_k
            if n <= 0:
                continue
            kk, vv = k[cu_k[i]:cu_k[i] + n], v[cu_k[i]:cu_k[i] + n]
            for hh in range(q.shape[1]):
                s = kk[:, hh] @ q[cu_q[i] + r, hh] * scale
                mx = s.max()
                e = np.exp(s - mx)
                out[cu_q[i] + r, hh] = e @ vv[:, hh] / e.sum()
                lse[hh, cu_q[i] + r] = mx + np.log(e.sum())
    return out, lse


@pytest.mark.parametrize("h", [1, 3])
@pytest.mark.parametrize("q_std", [1.0, 100.0])
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_equals_numpy(h, q_std, causal):
    q, k, v, cu_q, cu_k = _varlen(h, 11 + h, q_std)
    scale = config.softmax_scale_exact(D_QK, True, 1.0, 40.0)
    out, lse = P.prefill_attention(q, k, v, cu_q, cu_k, causal, scale)
    want, want_lse = _numpy_prefill(q, k, v, cu_q, cu_k, causal, scale)
    assert np.array_equal(np.isinf(lse), np.isinf(want_lse)) and np.all(lse[np.isinf(lse)] > 0)
    assert _rel(out, want) <= T.PREFILL_VS_NUMPY_FP64_REL
    fin = np.isfinite(want_lse)
    assert np.abs(lse[fin] - want_lse[fin]).max() <= T.PREFILL_VS_NUMPY_FP64_REL * np.abs(want_lse[fin]).max()


@pytest.mark.parametrize("pipeline", P.PIPELINES)
def test_empty_rows(pipeline):
    q, k, v, cu_q, cu_k = _varlen(3, 2)
    out, lse = P.prefill_attention(q, k, v, cu_q, cu_k, True, 0.07, pipeline)
    assert np.isfinite(out).all() and not np.isnan(lse).any()
    # kv_len 0: (1, 0) is the first pair, row 0
    assert np.all(out[0] == 0) and np.all(np.isposinf(lse[:, 0]))
    # (65, 63): bottom-right alignment leaves its first two rows empty, the third sees key 0 only
    r0 = cu_q[PAIRS.index((65, 63))]
    assert np.all(out[r0:r0 + 2] == 0) and np.all(np.isposinf(lse[:, r0:r0 + 2]))
    k0 = cu_k[PAIRS.index((65, 63))]
    tol = 0 if pipeline != "bf16" else 2 ** -8
    assert np.allclose(out[r0 + 2], v[k0], rtol=tol, atol=0) and np.isfinite(lse[:, r0 + 2]).all()
    # a non-causal call has only the kv_len 0 row empty
    _, lse_nc = P.prefill_attention(q, k, v, cu_q, cu_k, False, 0.07, pipeline)
    assert np.isposinf(lse_nc).sum() == q.shape[1]


def test_one_dominant_logit():
    q, k, v, cu_q, cu_k = _varlen(3, 4, 100.0, pairs=[(4, 40)])
    k[17] = q[2] * 8  # query 2 (it sees keys 0..38) meets itself, scaled: a logit ~1e5 above the rest
    for pipeline in P.PIPELINES:
        out, lse = P.prefill_attention(q, k, v, cu_q, cu_k, True, 0.07, pipeline)
        assert np.array_equal(out[2], v[17])  # every other weight underflows to 0; v is bf16-valued
        assert np.isfinite(out).all() and np.isfinite(lse).all()


@pytest.mark.parametrize("h", [1, 3])
def test_deployed_pipelines_close_to_truth(h):
    q, k, v, cu_q, cu_k = _varlen(h, 9)
    t_out, t_lse = P.prefill_attention(q, k, v, cu_q, cu_k, True, 0.07, "fp64")
    fin = np.isfinite(t_lse)
    for pipeline, tol in (("fp32", T.FP32_VS_FP64_REL), ("bf16", T.BF16_VS_FP64_REL)):
        out, lse = P.prefill_attention(q, k, v, cu_q, cu_k, True, 0.07, pipeline)
        assert _rel(out, t_out) < tol
        assert np.array_equal(np.isinf(lse), ~fin) and np.abs(lse[fin] - t_lse[fin]).max() < T.FP32_VS_FP64_REL * 10
    out, _ = P.prefill_attention(q, k, v, cu_q, cu_k, True, 0.07, "bf16")
    assert np.array_equal(out, numerics.round_bf16_np(out))


def test_softmax_scale_is_the_layers():
    # 192^-0.5 · mscale^2 with the layer's own YaRN parameters (V3: rope_factor 40, mscale 1)
    a = config.preset("v3")
    m = 0.1 * a.mscale * np.log(a.rope_factor) + 1
    assert abs(a.softmax_scale - D_QK ** -0.5 * m * m) <= 1e-15 * a.softmax_scale


def test_bad_varlen_arguments():
    q, k, v, cu_q, cu_k = _varlen(1, 1, pairs=[(2, 3)])
    with pytest.raises(ValueError, match="cu_seqlens_k must start at 0"):
        P.prefill_attention(q, k, v, cu_q, np.array([0, 2]), True, 0.1)
    with pytest.raises(ValueError, match="disagree"):
        P.prefill_attention(q, k[:, :, :64], v, cu_q, cu_k, True, 0.1)
    with pytest.raises(ValueError, match="unknown pipeline"):
        P.prefill_attention(q, k, v, cu_q, cu_k, True, 0.1, "fp16")


# ---------------------------------------------------------------- lse conventions

def test_lse_converters():
    q, k, v, cu_q, cu_k = _varlen(3, 6)
    _, lse = P.prefill_attention(q, k, v, cu_q, cu_k, True, 0.07)
    fin = np.isfinite(lse)
    l2 = P.lse_to_base2(lse)
    assert np.allclose(l2[fin], lse[fin] / np.log(2), rtol=1e-15, atol=0) and np.array_equal(np.isposinf(l2), ~fin)
    assert np.allclose(P.lse_from_base2(l2)[fin], lse[fin], rtol=5e-16, atol=0)  # two roundings
    tm = P.lse_token_major(lse)
    assert tm.shape == (lse.shape[1], lse.shape[0]) and np.array_equal(P.lse_head_major(tm), lse)
    neg = P.lse_empty_as(lse, -np.inf)
    assert np.array_equal(np.isneginf(neg), ~fin) and np.array_equal(neg[fin], lse[fin])
    assert np.array_equal(P.lse_empty_as(neg, np.inf), lse)
    with pytest.raises(ValueError, match=r"\+inf or -inf"):
        P.lse_empty_as(lse, 0.0)


def test_mha_inputs_pipelines():
    a, w = _weights("tiny", 8)
    x = layer.x_generator(a, 8, 0, 2, 5).values()
    truth = P.mha_inputs(a, w, x)
    # k's rope part is one k_pe for every head
    nope = a.qk_nope_head_dim
    assert np.array_equal(truth[1][..., nope:], np.broadcast_to(truth[1][:, :, :1, nope:], truth[1][..., nope:].shape))
    for pipeline, tol in (("fp32", T.FP32_VS_FP64_REL), ("bf16", T.BF16_VS_FP64_REL)):
        got = P.mha_inputs(a, w, x, pipeline=pipeline)
        for g, t in zip(got, truth):
            assert g.shape == t.shape and _rel(g, t) < tol
        if pipeline == "bf16":  # the deployed kernel's operands are bf16 values
            assert all(np.array_equal(g, numerics.round_bf16_np(g)) for g in got)
    with pytest.raises(ValueError, match="unknown pipeline"):
        P.mha_inputs(a, w, x, pipeline="bf16x")
    with pytest.raises(ValueError, match=r"x must be \[b, s, 64\]"):
        P.mha_inputs(a, w, x[0])


def test_pack():
    seqs = [np.ones((n, 2, 3)) * n for n in (0, 1, 63, 64, 65)]
    packed, cu = P.pack(seqs)
    assert list(cu) == [0, 0, 1, 64, 128, 193] and cu.dtype == np.int32
    assert all(np.array_equal(packed[cu[i]:cu[i + 1]], s) for i, s in enumerate(seqs))
