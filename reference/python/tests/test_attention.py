import numpy as np

from mla_ref import attention as A
from mla_ref import config, generator, layer, numerics
from mla_ref import tolerances as T


def _paged(lengths, ps, seed, extra_blocks=1, perm=None):
    need = A.pages_needed(lengths, ps)
    nb = sum(need) + extra_blocks
    perm = generator.permutation(seed, 3, nb) if perm is None else perm
    bt, used = A.make_block_table(lengths, ps, perm, max(need + [0]) + 1)
    cache = numerics.bf16_bits_to_f64(generator.uniform_bf16_bits(seed, 2, (nb, ps, A.D_QK)))
    cache[~used] = np.nan
    return cache, bt, used


def _q(b, s_q, h, seed, std=1.0):
    return numerics.bf16_bits_to_f64(generator.uniform_bf16_bits(seed, 1, (b, s_q, h, A.D_QK), 0.0, std))


def test_core_equals_full_layer_absorbed():
    """A full-layer step's absorbed query and caches, paged, through the core == the layer's latent output."""
    a = config.preset("v2-lite")
    w = {k: g.values() for k, g in layer.weight_generators(a, 5).items()}
    b = 2
    m = layer.MLA(a, w, "fp64", "absorbed", b)
    pos = 0
    for k, s in enumerate([3, 1, 1]):
        rec = {}
        m.forward(layer.x_generator(a, 5, k, b, s).values(), pos, rec)
        pos += s
        q = np.concatenate([rec["q_absorbed"].numpy(), rec["q_pe"].numpy()], axis=-1)  # [b, s, h, 576]
        caches = m.caches()
        logical = np.concatenate([caches["kv_cache"], caches["pe_cache"]], axis=-1)  # [b, T, 576]
        ps = 2
        lengths = [pos] * b
        need = A.pages_needed(lengths, ps)
        nb = sum(need) + 1
        perm = generator.permutation(11, 3, nb)
        bt, used = A.make_block_table(lengths, ps, perm, max(need) + 1)
        phys = np.full((nb, ps, A.D_QK), np.nan)
        for i in range(b):
            for t in range(pos):
                phys[bt[i, t // ps], t % ps] = logical[i, t]
        out, lse = A.attention(q, phys, bt, np.array(lengths, np.int32), a.softmax_scale, True)
        want = rec["latent_out"].numpy()
        assert np.abs(out - want).max() <= T.CORE_VS_LAYER_FP64_REL * np.abs(want).max()
        # lse agrees with the layer's scores
        sc = rec["scores"].numpy()  # [b, s, h, T]
        mx = sc.max(-1)
        want_lse = mx + np.log(np.exp(sc - mx[..., None]).sum(-1))
        assert np.allclose(lse, want_lse.transpose(0, 2, 1), rtol=1e-13, atol=0)


def test_page_permutation_invariance():
    lengths, ps, h, s_q = [0, 1, 63, 64, 65, 100], 16, 4, 2
    cache, bt, used = _paged(lengths, ps, 21)
    q = _q(len(lengths), s_q, h, 21)
    sl = np.array(lengths, np.int32)
    ref = A.attention(q, cache, bt, sl, 0.05, True)
    ref_sd = A.attention(q, cache, bt, sl, 0.05, True, precision="same_dtype")
    # move every physical block to a new place, rewrite the table accordingly
    nb = cache.shape[0]
    new_pos = generator.permutation(99, 3, nb)
    cache2 = np.full_like(cache, np.nan)
    cache2[new_pos] = cache
    bt2 = bt.copy()
    m = bt != A.SENTINEL_BLOCK_ID
    bt2[m] = new_pos[bt[m]]
    for prec, r in (("truth", ref), ("same_dtype", ref_sd)):
        o, l = A.attention(q, cache2, bt2, sl, 0.05, True, precision=prec)
        assert np.abs(o - r[0]).max() <= T.PAGE_PERMUTATION_REL * np.abs(r[0]).max()
        assert np.array_equal(l, r[1])


def test_empty_rows_and_causal_limits():
    lengths, ps, h, s_q = [0, 1, 3, 70], 16, 3, 4
    cache, bt, _ = _paged(lengths, ps, 4)
    q = _q(len(lengths), s_q, h, 4)
    sl = np.array(lengths, np.int32)
    for prec in ("truth", "same_dtype"):
        out, lse = A.attention(q, cache, bt, sl, 0.1, True, precision=prec)
        assert np.all(out[0] == 0) and np.all(np.isposinf(lse[0]))
        # L=1, s_q=4: only the last query (i=3) attends (to position 0)
        assert np.all(out[1, :3] == 0) and np.all(np.isposinf(lse[1, :, :3]))
        assert np.allclose(out[1, 3], np.broadcast_to(cache[bt[1, 0], 0, :512], (h, 512)), rtol=1e-2 if prec != "truth" else 0)
        # L=3: query 0 empty, queries 1..3 attend to 1, 2, 3 positions
        assert np.all(out[2, 0] == 0) and np.all(np.isfinite(lse[2, :, 1:]))
        assert np.isfinite(out).all() and not np.isnan(lse).any()
    # query i attends exactly 0..L-s_q+i: compare with a single query on a truncated cache
    out, lse = A.attention(q, cache, bt, sl, 0.1, True)
    for i in range(s_q):
        Li = 70 - s_q + i + 1
        o1, l1 = A.attention(q[3:4, i:i + 1], cache, bt[3:4], np.array([Li], np.int32), 0.1, True)
        assert np.allclose(o1[0, 0], out[3, i], rtol=1e-14, atol=1e-15) and np.allclose(l1[0, :, 0], lse[3, :, i])


def test_unused_slots_are_never_read():
    lengths, ps = [5, 17], 16
    cache, bt, used = _paged(lengths, ps, 8, extra_blocks=2)
    assert np.isnan(cache[~used]).all() and (~used).sum() > 0
    out, lse = A.attention(_q(2, 2, 2, 8), cache, bt, np.array(lengths, np.int32), 0.1, True)
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    assert (bt[0, 1:] == A.SENTINEL_BLOCK_ID).all() and (bt[1, 2:] == A.SENTINEL_BLOCK_ID).all()


def test_sparse_invalid_indices():
    lengths, ps, h, s_q = [40, 9], 16, 4, 2
    cache, bt, _ = _paged(lengths, ps, 13)
    q = _q(2, s_q, h, 13)
    sl = np.array(lengths, np.int32)
    valid = [[3, 0, 39, 17], [8, 1]]
    junk = [-1, -2, -2147483648, 40, 45, 2147483647]
    idx = np.full((2, s_q, 8), -1, np.int64)
    idx[0, 0] = [3, -1, 0, 2147483647, 39, -7, 17, 40]  # valid {3, 0, 39, 17}, 40 == L invalid
    idx[0, 1] = junk + [-3, -4]  # all invalid
    idx[1, 0] = [9, 8, -1, 1, 10, 2147483647, -2147483648, 100]  # valid {8, 1} (L = 9)
    idx[1, 1] = [0, 1, 2, 3, 4, 5, 6, 7]
    idx = idx.astype(np.int32)
    for prec in ("truth", "same_dtype"):
        out, lse = A.attention(q, cache, bt, sl, 0.1, indices=idx, precision=prec)
        assert np.all(out[0, 1] == 0) and np.all(np.isposinf(lse[0, :, 1]))
        # == dense attention over exactly the valid positions (no causal mask on top)
        for (i, j), pos in (((0, 0), valid[0]), ((1, 0), valid[1]), ((1, 1), list(range(8)))):
            K = A.gather(cache, bt, i, lengths[i])[pos]
            s = q[i, j] @ K.T * 0.1
            mx = s.max(-1, keepdims=True)
            p = np.exp(s - mx)
            want = (p / p.sum(-1, keepdims=True)) @ K[:, :512]
            tol = 0 if prec == "truth" else 2e-2
            assert np.allclose(out[i, j], want, rtol=1e-12 + tol, atol=1e-12 + tol)
            assert np.allclose(lse[i, :, j], (mx + np.log(p.sum(-1, keepdims=True)))[:, 0], rtol=1e-12 + tol / 10)


def test_sparse_all_positions_equals_dense_single_query():
    lengths, ps = [50], 64
    cache, bt, _ = _paged(lengths, ps, 2)
    q = _q(1, 1, 8, 2)
    idx = generator.permutation(2, 50, 50).astype(np.int32)[None, None]
    d = A.attention(q, cache, bt, np.array(lengths, np.int32), 0.07, True)
    s = A.attention(q, cache, bt, np.array(lengths, np.int32), 0.07, indices=idx)
    assert np.allclose(d[0], s[0], rtol=1e-13, atol=1e-14) and np.allclose(d[1], s[1], rtol=1e-14)


def test_same_dtype_definition():
    """same_dtype: float32 scores and softmax, P rounded to bf16, float32 P.V, output bf16."""
    lengths, ps = [33], 16
    cache, bt, _ = _paged(lengths, ps, 6)
    q = _q(1, 1, 2, 6)
    out, lse = A.attention(q, cache, bt, np.array(lengths, np.int32), 0.1, True, precision="same_dtype")
    K = A.gather(cache, bt, 0, 33).astype(np.float32)
    s = (q[0, 0].astype(np.float32) @ K.T) * np.float32(0.1)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    ssum = e.sum(-1, keepdims=True, dtype=np.float32)
    p = numerics.bf16_bits_to_f32(numerics.bf16_bits_from_f32(e / ssum))
    o = numerics.bf16_bits_to_f64(numerics.bf16_bits_from_f32(p @ K[:, :512]))
    assert np.array_equal(out, numerics.round_bf16_np(out))
    # float32 sums may be ordered differently: allow one bf16 ulp
    assert np.allclose(out[0, 0], o, rtol=2 ** -7, atol=1e-6)
    assert np.allclose(lse[0, :, 0], (m + np.log(ssum))[:, 0], rtol=1e-6)
