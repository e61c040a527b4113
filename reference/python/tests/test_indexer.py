from fractions import Fraction

import numpy as np
import pytest
import torch

from mla_ref import config, indexer as I, numerics as N, rope
from mla_ref import tolerances as T


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max()


def _setup(seed=5, batch=2, seqlen=6, preset="tiny-indexer"):
    a = config.preset(preset)
    w = {k: g.values() for k, g in I.weight_generators(a, seed).items()}
    rng = np.random.default_rng(seed)
    x = N.round_bf16_np(rng.standard_normal((batch, seqlen, a.dim)))
    qr = N.round_bf16_np(rng.standard_normal((batch, seqlen, a.q_lora_rank)))
    return a, w, x, qr


# ---------------------------------------------------------------- Hadamard

@pytest.mark.parametrize("n", [1, 2, 8, 128])
def test_hadamard_matrix_is_sylvester_and_orthogonal(n):
    h = I.hadamard_matrix(n)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    parity = np.vectorize(lambda v: bin(int(v)).count("1") % 2)(i & j)
    assert np.array_equal(h, np.where(parity == 1, -1, 1))  # closed form (-1)^popcount(i & j)
    assert np.array_equal(h @ h.T, n * np.eye(n, dtype=np.int64))
    assert np.array_equal(h, h.T)


def test_hadamard_transform_matches_matrix_product_and_is_an_involution():
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((3, 5, 128)))
    y = I.hadamard(x, "fp64")
    direct = x.numpy() @ I.hadamard_matrix(128).astype(np.float64) / np.sqrt(128.0)
    assert _rel(y.numpy(), direct) <= T.INDEXER_HADAMARD_FP64_REL
    assert _rel(I.hadamard(y, "fp64").numpy(), x.numpy()) <= 4 * T.INDEXER_HADAMARD_FP64_REL  # orthogonal, symmetric
    assert abs(float((y * y).sum() / (x * x).sum()) - 1.0) < 1e-14  # norm preserved


def test_hadamard_bf16_is_the_rounded_fp64_transform():
    x = N.round_bf16_np(np.random.default_rng(2).standard_normal((4, 128)))
    y = I.hadamard(torch.from_numpy(x).float(), "bf16").double().numpy()
    truth = I.hadamard(torch.from_numpy(x), "fp64").numpy()
    assert np.array_equal(y, N.round_bf16_np(y))  # bf16 values
    # float32 butterflies then one bf16 rounding: within one bf16 ulp (2^-8 relative) of the truth
    assert np.all(np.abs(y - truth) <= 2.0 ** -8 * np.abs(truth) + 1e-30)


def test_hadamard_rejects_bad_sizes():
    with pytest.raises(ValueError, match="power of two"):
        I.hadamard_matrix(96)
    with pytest.raises(ValueError, match="precision"):
        I.hadamard(torch.zeros(2, 4), "fp16")


# ---------------------------------------------------------------- RoPE layouts

def _half_perm(r):
    """half-layout column j <- interleaved column perm[j]: pair i is (2i, 2i+1) -> (i, i + r/2)."""
    return np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2)])


def test_rope_layouts_agree_after_the_permutation_and_differ_otherwise():
    a = config.preset("tiny-indexer")
    r = a.qk_rope_head_dim
    c, s = (torch.from_numpy(v) for v in rope.cos_sin(a, 3, 5))
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((2, 5, 4, r)))
    p = torch.from_numpy(_half_perm(r))
    inter = I.apply_rope(x, c, s, "interleaved")
    half = I.apply_rope(x[..., p], c, s, "half")
    assert torch.equal(half, inter[..., p])  # the same floating-point operations, permuted
    assert _rel(I.apply_rope(x, c, s, "half").numpy(), inter.numpy()) > 0.1
    with pytest.raises(ValueError, match="rope layout"):
        I.apply_rope(x, c, s, "neox")


def test_rope_layouts_give_the_same_scores_on_permuted_weights():
    a, w, x, qr = _setup(seqlen=4)
    H, D, r = a.index_n_heads, a.index_head_dim, a.qk_rope_head_dim
    col = np.arange(D)
    col[:r] = _half_perm(r)  # within a head: rope columns permuted, nope columns kept
    wh = dict(w)
    wh["wq_b"] = w["wq_b"].reshape(H, D, -1)[:, col].reshape(H * D, -1)
    wh["wk"], wh["k_norm_weight"], wh["k_norm_bias"] = w["wk"][col], w["k_norm_weight"][col], w["k_norm_bias"][col]

    def dots(p):
        return np.einsum("bshd,btd->bsht", p.q, p.k)

    inter = I.project(a, w, x, qr, 2, "interleaved", "fp64")
    half = I.project(a, wh, x, qr, 2, "half", "fp64")
    # Hadamard is orthogonal: q.k equals the pre-rotation dot, which the permutation preserves
    assert _rel(dots(half), dots(inter)) <= T.INDEXER_ROPE_LAYOUTS_FP64_REL
    assert np.array_equal(half.weights_proj, inter.weights_proj)
    assert _rel(dots(I.project(a, w, x, qr, 2, "half", "fp64")), dots(inter)) > 1e-3  # the layout matters


@pytest.mark.parametrize("layout", I.ROPE_LAYOUTS)
def test_projection_equals_a_direct_computation(layout):
    a, w, x, qr = _setup(seqlen=3)
    start, H, D, r = 5, a.index_n_heads, a.index_head_dim, a.qk_rope_head_dim
    rot = np.exp(1j * rope.angles(a, start, 3))  # [s, r/2], numpy's own cos/sin

    def roped(v):  # v [b, s, (h,) r]: pairs as complex numbers, multiplied by e^(i angle)
        z = v[..., 0::2] + 1j * v[..., 1::2] if layout == "interleaved" else v[..., :r // 2] + 1j * v[..., r // 2:]
        z = z * (rot[None, :, None] if v.ndim == 4 else rot[None])
        if layout == "interleaved":
            return np.stack([z.real, z.imag], -1).reshape(v.shape)
        return np.concatenate([z.real, z.imag], -1)

    q = (qr @ w["wq_b"].T).reshape(2, 3, H, D)
    q = np.concatenate([roped(q[..., :r]), q[..., r:]], -1)  # rope columns first
    k = x @ w["wk"].T
    k = (k - k.mean(-1, keepdims=True)) / np.sqrt(k.var(-1, keepdims=True) + 1e-6) * w["k_norm_weight"] + w["k_norm_bias"]
    k = np.concatenate([roped(k[..., :r]), k[..., r:]], -1)
    had = I.hadamard_matrix(D) / np.sqrt(D)
    p = I.project(a, w, x, qr, start, layout, "fp64")
    assert _rel(p.q, q @ had) <= T.INDEXER_ROPE_LAYOUTS_FP64_REL
    assert _rel(p.k, k @ had) <= T.INDEXER_ROPE_LAYOUTS_FP64_REL
    assert _rel(p.weights_proj, x @ w["weights_proj"].T / np.sqrt(H)) <= T.INDEXER_ROPE_LAYOUTS_FP64_REL
    b = I.project(a, w, x, qr, start, layout, "bf16")
    for got, want in zip(b, p):
        assert np.array_equal(got, N.round_bf16_np(got)) and _rel(got, want) <= T.BF16_VS_FP64_REL


# ---------------------------------------------------------------- quantization

@pytest.mark.parametrize("fmt", N.SCALE_FMTS)
def test_act_quant_round_trip_within_the_e4m3_bound(fmt):
    rng = np.random.default_rng(4)
    mag = 10.0 ** rng.uniform(-6, 4, size=(64, 1))  # blocks from below the 1e-4 amax floor to 1e4
    x = N.round_bf16_np(rng.standard_normal((64, 256)) * mag)
    x[0, :128] = 0.0  # an all-zero block
    codes, scale = N.act_quant(x, fmt)
    back = N.act_dequant(codes, scale)
    s = np.repeat(scale.astype(np.float64), 128, axis=-1)
    # round to nearest: half an e4m3 quantum, 2^-4 relative for normals, 2^-10 * scale below 2^-6
    assert np.all(np.abs(back - x) <= 2.0 ** -4 * np.abs(x) + 2.0 ** -10 * s)
    amax = np.abs(x.reshape(64, 2, 128)).max(-1)
    big = amax >= 1e-4
    if fmt == "ue8m0":
        assert np.array_equal(scale, np.exp2(np.round(np.log2(scale))))  # powers of two
        assert np.all((amax[big] / scale[big] > 224) & (amax[big] / scale[big] <= 448))
    else:
        assert np.all(np.abs(amax[big] / scale[big] / 448 - 1) < 2.0 ** -22)
    assert np.all(scale[~big] == N.act_quant_scale(np.float32(1e-4), fmt))  # the amax floor


def test_act_quant_scale_is_the_reciprocal_product():
    a = np.random.default_rng(5).uniform(1e-3, 1e3, 100000).astype(np.float32)
    got = N.act_quant_scale(a, "fp32")
    assert np.array_equal(got, (a * np.float32(1.0 / 448.0)).astype(np.float32))
    div = N.fp8_block_scale(a, "fp32", "deepseek_v32")
    differ = got != div
    assert differ.any()  # not the cache recipe's quotient ...
    assert np.all(np.abs(got.view(np.int32).astype(np.int64) - div.view(np.int32)) <= 1)  # ... but within an ulp
    assert np.array_equal(N.act_quant_scale(a, "ue8m0"), N.fp8_block_scale(a, "ue8m0", "deepseek_v32"))


def test_act_quant_rejects_bad_input():
    with pytest.raises(ValueError, match="multiple of the block"):
        N.act_quant(np.zeros((2, 100)), "ue8m0")
    with pytest.raises(ValueError, match="non-finite"):
        N.act_quant(np.full((1, 128), np.inf), "fp32")
    with pytest.raises(ValueError, match="scale_fmt"):
        N.act_quant(np.ones((1, 128)), "e8m0")


# ---------------------------------------------------------------- logits

@pytest.mark.parametrize("fmt", N.SCALE_FMTS)
@pytest.mark.parametrize("precision", I.PRECISIONS)
def test_logits_equal_the_formula(fmt, precision):
    a, w, x, qr = _setup()
    p = I.project(a, w, x, qr, 0, "interleaved", precision)
    qz = I.quantize(a, p, fmt, precision)
    got = I.logits_truth(qz.q_codes, qz.weights, qz.k_codes, qz.k_scale)
    q8, k8 = N.E4M3_TABLE[qz.q_codes], N.E4M3_TABLE[qz.k_codes]
    want = np.einsum("bsh,bsht->bst", qz.weights.astype(np.float64),
                     np.maximum(np.einsum("bshd,btd->bsht", q8, k8), 0.0)) * qz.k_scale[:, None, :]
    assert _rel(got, want) <= T.INDEXER_TRUTH_VS_EINSUM_REL
    # the same scores from dequantized q and k with the scales unfolded: weights_proj * D^-1/2 per head
    q = N.act_dequant(qz.q_codes, qz.q_scale[..., None])
    k = N.act_dequant(qz.k_codes, qz.k_scale[..., None])
    head_w = p.weights_proj / np.sqrt(a.index_head_dim)
    unfolded = np.einsum("bsh,bsht->bst", head_w, np.maximum(np.einsum("bshd,btd->bsht", q, k), 0.0))
    assert _rel(got, unfolded) <= (T.INDEXER_TRUTH_VS_EINSUM_REL if precision == "fp64"
                                   else T.INDEXER_DEPLOYED_VS_TRUTH_REL)  # bf16: float32 weight products
    dep = I.logits_deployed(qz.q_codes, qz.weights, qz.k_codes, qz.k_scale)
    assert np.array_equal(dep, dep.astype(np.float32))
    assert _rel(dep, got) <= T.INDEXER_DEPLOYED_VS_TRUTH_REL


def test_logits_truth_is_the_nearest_float64_of_the_exact_value():
    a, w, x, qr = _setup(batch=1, seqlen=3)
    qz = I.quantize(a, I.project(a, w, x, qr, 0, "half", "bf16"), "fp32", "bf16")
    got = I.logits_truth(qz.q_codes, qz.weights, qz.k_codes, qz.k_scale)
    q8, k8 = N.E4M3_TABLE[qz.q_codes], N.E4M3_TABLE[qz.k_codes]
    for s in range(3):
        for t in range(3):
            exact = Fraction(0)
            for h in range(a.index_n_heads):
                dot = sum((Fraction(float(u)) * Fraction(float(v)) for u, v in zip(q8[0, s, h], k8[0, t])), Fraction(0))
                exact += Fraction(float(qz.weights[0, s, h])) * max(dot, Fraction(0))
            exact *= Fraction(float(qz.k_scale[0, t]))
            assert abs(Fraction(float(got[0, s, t])) - exact) <= 2 * abs(exact) * Fraction(2) ** -53, (s, t)


def test_logits_reject_mismatched_operands():
    a, w, x, qr = _setup()
    qz = I.quantize(a, I.project(a, w, x, qr, 0, "half", "bf16"), "ue8m0", "bf16")
    with pytest.raises(ValueError, match="disagree"):
        I.logits_truth(qz.q_codes, qz.weights[..., :2], qz.k_codes, qz.k_scale)
    nan = qz.k_codes.copy()
    nan[0, 0, 0] = N.E4M3_NAN
    with pytest.raises(ValueError, match="NaN"):
        I.logits_deployed(qz.q_codes, qz.weights, nan, qz.k_scale)


# ---------------------------------------------------------------- mask and top-k

def test_causal_mask_is_upstreams():
    for s in (2, 5):
        upstream = torch.full((s, s), float("-inf")).triu_(1).double().numpy()  # the prompt mask upstream adds
        m = I.causal_mask(s, 0)
        assert np.array_equal(np.isneginf(m), np.isneginf(upstream)) and np.all(m[np.isfinite(m)] == 0)
        i, j = np.indices((s, s))
        assert np.array_equal(np.isneginf(m), j > i)
    assert I.causal_mask(1, 0) is None and I.causal_mask(1, 7) is None  # a decode token sees all of 0 .. 7
    with pytest.raises(ValueError, match="start_pos == 0"):
        I.causal_mask(3, 4)


def test_topk_finds_a_set_separated_by_a_gap():
    rng = np.random.default_rng(6)
    lg = rng.standard_normal((2, 3, 40))
    chosen = np.stack([np.stack([rng.choice(40, 8, replace=False) for _ in range(3)]) for _ in range(2)])
    np.put_along_axis(lg, chosen, np.take_along_axis(lg, chosen, -1) + 100.0, -1)
    r = I.topk(lg, 8)
    assert r.indices.shape == (2, 3, 8) and not r.boundary_tie.any()
    assert np.array_equal(np.sort(r.indices, -1), np.sort(chosen, -1))
    vals = np.take_along_axis(lg, r.indices, -1)
    assert np.all(np.diff(vals, axis=-1) <= 0)  # descending
    lg[0, 0, chosen[0, 0, 0]] = -100.0  # one chosen position pushed below the rest: the set changes
    assert set(I.topk(lg, 8).indices[0, 0]) != set(chosen[0, 0])
    tie = np.zeros((1, 1, 10))
    tie[0, 0, :3] = 1.0
    assert I.topk(tie, 4).boundary_tie.all() and not I.topk(tie, 3).boundary_tie.any()


def test_topk_with_fewer_valid_positions_than_k_follows_upstream():
    s, index_topk = 6, 4
    lg = np.random.default_rng(7).standard_normal((1, s, s))
    mask = I.causal_mask(s, 0)
    r = I.topk(lg, index_topk, mask)
    assert r.indices.shape == (1, s, min(index_topk, s))  # k = min(index_topk, end_pos), never the row's horizon
    assert np.array_equal(r.n_valid[0], np.arange(1, s + 1))
    up = torch.from_numpy(lg + mask[None]).topk(min(index_topk, s), dim=-1)
    for i in range(s):
        n = min(i + 1, index_topk)
        assert set(r.indices[0, i, :n]) == set(up.indices[0, i, :n].tolist())  # the valid part: upstream's set
        assert set(r.indices[0, i, :n]) <= set(range(i + 1))
        pad = r.indices[0, i, n:]
        assert np.all(pad > i) and len(set(pad)) == len(pad)  # the rest: distinct masked (future) positions
        assert np.all(np.isneginf(up.values[0, i, n:].numpy()))  # upstream pads with masked ones too
    big = I.topk(lg, 50, mask)
    assert big.indices.shape == (1, s, s)
    with pytest.raises(ValueError, match="NaN"):
        I.topk(np.full((1, 1, 3), np.nan), 2)


# ---------------------------------------------------------------- one step with the cache

@pytest.mark.parametrize("layout", I.ROPE_LAYOUTS)
def test_decode_step_reads_the_cache_as_prefill_would(layout):
    a, w, x, qr = _setup(seqlen=5)
    pre = I.forward(a, w, x[:, :4], qr[:, :4], 0, I.KeyCache.empty(2, a.index_head_dim), layout, "ue8m0")
    dec = I.forward(a, w, x[:, 4:], qr[:, 4:], 4, pre.cache, layout, "ue8m0")
    full = I.forward(a, w, x, qr, 0, I.KeyCache.empty(2, a.index_head_dim), layout, "ue8m0")
    assert dec.mask is None and dec.logits_truth.shape == (2, 1, 5)
    assert np.array_equal(dec.cache.codes, full.cache.codes) and np.array_equal(dec.cache.scales, full.cache.scales)
    assert np.array_equal(dec.logits_truth[:, 0], full.logits_truth[:, 4])  # last prompt row sees 0..4 too
    assert np.array_equal(dec.topk_truth.indices[:, 0], full.topk_truth.indices[:, 4])
    assert np.all(dec.topk.n_valid == 5) and dec.topk.indices.shape == (2, 1, 5)
    with pytest.raises(ValueError, match="key cache"):
        I.forward(a, w, x[:, 4:], qr[:, 4:], 3, pre.cache, layout, "ue8m0")


def test_presets_and_argument_checks():
    v32, v3 = config.preset("v32"), config.preset("v3")
    assert (v32.index_n_heads, v32.index_head_dim, v32.index_topk) == (64, 128, 2048)  # config_671B_v3.2.json
    assert v32.attrs() == v3.attrs()  # V3.2 keeps V3's MLA
    a, w, x, qr = _setup()
    with pytest.raises(ValueError, match="index_head_dim"):
        I.project(config.ModelArgs(**{**a.__dict__, "index_head_dim": 64}), w, x, qr, 0, "half", "bf16")
    with pytest.raises(ValueError, match="rope layout"):
        I.project(a, w, x, qr, 0, "neox", "bf16")
    with pytest.raises(ValueError, match="precision"):
        I.project(a, w, x, qr, 0, "half", "fp32")
