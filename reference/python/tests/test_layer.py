import numpy as np
import pytest

from mla_ref import config, layer, numerics
from mla_ref import tolerances as T


def _setup(preset, seed=3, batch=2, prefill=4, n_decode=3):
    a = config.preset(preset)
    w = {k: g.values() for k, g in layer.weight_generators(a, seed).items()}
    steps, pos = [], 0
    for k in range(1 + n_decode):
        s = prefill if k == 0 else 1
        steps.append((layer.x_generator(a, seed, k, batch, s).values(), pos))
        pos += s
    return a, w, steps


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("preset", ["tiny", "tiny-noyarn", "tiny-noqlora", "tiny-noqlora-noyarn", "v2-lite"])
def test_naive_equals_absorbed_fp64(preset):
    a, w, steps = _setup(preset, batch=2 if preset.startswith("tiny") else 1,
                         prefill=4 if preset.startswith("tiny") else 2, n_decode=3 if preset.startswith("tiny") else 1)
    out, inter, caches = layer.run_steps(a, w, steps, pipelines=("fp64",))
    for k in range(len(steps)):
        assert _rel(out[(k, "fp64", "naive")], out[(k, "fp64", "absorbed")]) <= T.NAIVE_VS_ABSORBED_FP64_REL
        pn, pa = inter[(k, "naive")]["probs"], inter[(k, "absorbed")]["probs"]
        assert np.abs(pn - pa).max() <= T.NAIVE_VS_ABSORBED_FP64_REL
    # the caches are consistent: k_cache's rope part is pe_cache for every head, k_nope = W_UK c
    kc, pc = caches[("fp64", "naive")]["k_cache"], caches[("fp64", "absorbed")]["pe_cache"]
    assert np.array_equal(kc[..., a.qk_nope_head_dim:], np.broadcast_to(pc[:, :, None, :], kc[..., a.qk_nope_head_dim:].shape))


def test_pipelines_close_to_truth():
    a, w, steps = _setup("tiny")
    out, _, _ = layer.run_steps(a, w, steps, record_fp64=False)
    for k in range(len(steps)):
        for f in layer.FORMS:
            t = out[(k, "fp64", f)]
            assert _rel(out[(k, "fp32", f)], t) < T.FP32_VS_FP64_REL
            assert _rel(out[(k, "bf16", f)], t) < T.BF16_VS_FP64_REL
            # the bf16 pipeline's outputs are bf16 values
            assert np.array_equal(out[(k, "bf16", f)], numerics.round_bf16_np(out[(k, "bf16", f)]))


def test_prefill_equals_token_by_token():
    # causal mask + cache: a prefill of 5 gives the same last-token output as 1 + 4 decode steps
    a, w, _ = _setup("tiny")
    x = layer.x_generator(a, 9, 0, 2, 5).values()
    for f in layer.FORMS:
        m1 = layer.MLA(a, w, "fp64", f, 2)
        y1 = m1.forward(x, 0).numpy()
        m2 = layer.MLA(a, w, "fp64", f, 2)
        ys = [m2.forward(x[:, :1], 0).numpy()] + [m2.forward(x[:, i:i + 1], i).numpy() for i in range(1, 5)]
        y2 = np.concatenate(ys, axis=1)
        assert _rel(y2, y1) < 1e-13


def test_multi_token_step_needs_start_pos_zero():
    a, w, steps = _setup("tiny")
    m = layer.MLA(a, w, "fp64", "absorbed", 2)
    m.forward(steps[0][0], 0)
    with pytest.raises(ValueError, match="start_pos == 0"):
        m.forward(np.zeros((2, 2, a.dim)), 4)


@pytest.mark.parametrize("form", layer.FORMS)
def test_cache_boundary(form):
    a, w, _ = _setup("tiny")
    M = a.max_seq_len
    m = layer.MLA(a, w, "fp64", form, 1)
    m.forward(layer.x_generator(a, 1, 0, 1, M - 1).values(), 0)
    y = m.forward(layer.x_generator(a, 1, 1, 1, 1).values(), M - 1)  # the last slot: accepted
    assert np.isfinite(y.numpy()).all()
    with pytest.raises(layer.CacheCapacityError, match="cache capacity exceeded"):
        m.forward(layer.x_generator(a, 1, 2, 1, 1).values(), M)
    with pytest.raises(layer.CacheCapacityError):
        m.forward(layer.x_generator(a, 1, 2, 1, 1).values(), M + 7)
    m2 = layer.MLA(a, w, "fp64", form, 1)
    with pytest.raises(layer.CacheCapacityError):
        m2.forward(layer.x_generator(a, 1, 0, 1, M + 1).values(), 0)  # a prefill longer than the cache


def test_rope_is_interleaved():
    # RoPE rotates pairs (2i, 2i+1): at position p, pair i of a unit vector e_{2i} becomes (cos, sin)
    a = config.preset("tiny")
    w = {k: g.values() for k, g in layer.weight_generators(a, 1).items()}
    m = layer.MLA(a, w, "fp64", "absorbed", 1)
    import torch
    x = torch.zeros(1, 3, a.qk_rope_head_dim, dtype=torch.float64)
    x[..., 2] = 1.0  # e_2: pair i = 1
    y = m.rope(x, 5).numpy()
    from mla_ref import rope
    ang = rope.angles(a, 5, 3)[:, 1]
    assert np.allclose(y[0, :, 2], np.cos(ang)) and np.allclose(y[0, :, 3], np.sin(ang))
    assert np.all(y[0, :, [0, 1, 4, 5, 6, 7]] == 0)
