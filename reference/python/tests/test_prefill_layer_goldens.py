"""The layer-derived prefill cases on disk (the cases with a `layer_preset` attribute,
fixtures/SCHEMA.md "Layer-derived prefill cases"): their k shares one k_pe across the heads, their
inputs are the layer's q, k, v rounded to bf16, their truth is the layer's own attention before wo,
and the head cut is the full_layer case of the same preset and seed."""
import functools
import os

import h5py
import numpy as np
import pytest
import torch

from catalog_dir import GOLDENS
from mla_ref import config, layer, numerics, prefill, prefill_cases
from mla_ref import tolerances as T

PREFILL = os.path.join(GOLDENS, "prefill.h5")
FULL_LAYER = os.path.join(GOLDENS, "full_layer.h5")
pytestmark = pytest.mark.skipif(not os.path.exists(PREFILL) or not os.path.exists(FULL_LAYER),
                                reason="no prefill/full_layer goldens (run: ./mla.sh goldens)")


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def _layer_cases():
    if not os.path.exists(PREFILL):
        return []
    with h5py.File(PREFILL, "r") as f:
        return [n for n in f["cases"] if "layer_preset" in f["cases"][n].attrs]


@functools.lru_cache(maxsize=None)
def _case(name):
    """(attrs dict, stored q, k, v, cu_q, cu_k, truth out, truth lse) of prefill case `name`."""
    with h5py.File(PREFILL, "r") as f:
        c = f["cases"][name]
        qkv = tuple(numerics.bf16_bits_to_f64(c["inputs"][n][()]) for n in ("q", "k", "v"))
        return (dict(c.attrs),) + qkv + (c["inputs/cu_seqlens_q"][()], c["inputs/cu_seqlens_k"][()],
                                         c["truth/out"][()], c["truth/lse"][()])


@functools.lru_cache(maxsize=None)
def _layer(preset, heads, seed):
    args = prefill_cases.layer_args(preset, heads)
    return args, {n: g.values() for n, g in layer.weight_generators(args, seed).items()}


def _seqs(cu_q, cu_k):
    return [(int(cu_q[i + 1] - cu_q[i]), int(cu_k[i + 1] - cu_k[i])) for i in range(len(cu_q) - 1)]


def _k_pe_shared(k, rope):
    """Every token's last `rope` dims of k are the same in every head."""
    return bool(np.array_equal(k[:, :, -rope:], np.broadcast_to(k[:, :1, -rope:], k[:, :, -rope:].shape)))


def _layer_attention(args, weights, x, s_q, stored=None):
    """The fp64 naive layer's attention output before wo [s_q, h, d_v] and its lse [h, s_q] for the
    last s_q of the tokens x [1, s_k, dim]. stored = (q [s_q, h, 192], k, v [s_k, h, ..]): the
    layer's own scores, mask, scale and softmax run on these instead of its projections."""
    m = layer.MLA(args, weights, "fp64", "naive", 1)
    s_k = x.shape[1]
    if stored is not None:
        q, k, v = (torch.from_numpy(np.ascontiguousarray(a))[None] for a in stored)
        nope = args.qk_nope_head_dim
        q = torch.cat([torch.zeros((1, s_k - s_q) + tuple(q.shape[2:]), dtype=q.dtype), q], dim=1)
        m.project = lambda xt, start_pos: (q[..., :nope], q[..., nope:], None, None)
        m.naive_kv = lambda c, k_pe: (k, v)
    rec = {}
    m.forward(x, 0, rec)
    sc = rec["scores"].numpy()[0, s_k - s_q:]  # [s_q, h, s_k], masked with -inf
    mx = sc.max(-1)
    lse = mx + np.log(np.exp(sc - mx[..., None]).sum(-1))
    return rec["attn_out"].numpy()[0, s_k - s_q:], lse.T


def _errors(name, stored_inputs, scale=None):
    """Largest (out, lse) relative errors over the sequences of case `name`: its truth (or the fp64
    prefill of its stored inputs at `scale`) vs the layer's attention."""
    a, q, k, v, cu_q, cu_k, out, lse = _case(name)
    args, w = _layer(a["layer_preset"], int(a["heads"]), int(a["seed"]))
    if scale is not None:
        out, lse = prefill.prefill_attention(q, k, v, cu_q, cu_k, bool(a["causal"]), scale)
    e_out, e_lse = 0.0, 0.0
    for i, (s_q, s_k) in enumerate(_seqs(cu_q, cu_k)):
        x = prefill_cases.layer_tokens(args, int(a["seed"]), i, s_k)
        rq, rk = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        stored = (q[rq], k[rk], v[rk]) if stored_inputs else None
        o, l = _layer_attention(args, w, x, s_q, stored)
        e_out = max(e_out, _rel(out[rq], o))
        e_lse = max(e_lse, _rel(lse[:, rq], l))
    return e_out, e_lse


def test_there_are_layer_derived_cases_with_a_cached_prefix():
    names = _layer_cases()
    assert len(names) >= 2, names
    seqs = [s for n in names for s in _seqs(*_case(n)[4:6])]
    assert any(s_q < s_k for s_q, s_k in seqs) and any(1 < s_q == s_k for s_q, s_k in seqs), seqs


@pytest.mark.parametrize("name", _layer_cases())
def test_k_pe_is_shared_by_the_heads(name):
    a, _, k, _, _, _, _, _ = _case(name)
    args = config.preset(a["layer_preset"])
    assert a["heads"] >= 2 and _k_pe_shared(k, args.qk_rope_head_dim)
    # the heads are distinct elsewhere: their k_nope (W_UK c) differs
    assert not np.array_equal(k[:, 0, :args.qk_nope_head_dim], k[:, 1, :args.qk_nope_head_dim])


def test_k_pe_check_fails_on_random_keys():
    a, _, k, _, _, _, _, _ = _case("dominant_logit")  # stored, random per-head keys
    assert "layer_preset" not in a and not _k_pe_shared(k, config.preset("v3").qk_rope_head_dim)


@pytest.mark.parametrize("name", _layer_cases())
def test_inputs_are_the_layers_rounded_to_bf16(name):
    a, q, k, v, cu_q, cu_k, _, _ = _case(name)
    args = prefill_cases.layer_args(a["layer_preset"], int(a["heads"]))
    want = prefill_cases.layer_inputs(a["layer_preset"], int(a["heads"]), _seqs(cu_q, cu_k), int(a["seed"]))
    for got, w in zip((q, k, v), want):
        np.testing.assert_array_equal(got, numerics.round_bf16_np(w))
    # the layer's own scale, YaRN on: mscale^2 makes it differ from the plain d_qk^-1/2
    assert args.yarn and a["softmax_scale"] == args.softmax_scale
    assert a["softmax_scale"] != config.softmax_scale_exact(args.qk_head_dim)
    assert a["d_qk"] == args.qk_head_dim and a["d_v"] == args.v_head_dim


@pytest.mark.parametrize("name", _layer_cases())
def test_truth_is_the_layers_attention_on_the_stored_inputs(name):
    e_out, e_lse = _errors(name, stored_inputs=True)
    assert e_out <= T.CORE_VS_LAYER_FP64_REL and e_lse <= T.CORE_VS_LAYER_FP64_REL


@pytest.mark.parametrize("name", _layer_cases())
def test_truth_is_the_layers_attention_up_to_the_bf16_inputs(name):
    """Against the layer run from its tokens (q, k, v unrounded): only the inputs' rounding to bf16
    (relative 2^-9 each) separates them, well inside the bf16 check bound."""
    e_out, e_lse = _errors(name, stored_inputs=False)
    assert e_out <= T.CHECK_BF16_REL and e_lse <= T.CHECK_BF16_REL


def test_planted_scale_without_mscale_fails():
    name = _layer_cases()[0]
    a = _case(name)[0]
    args = prefill_cases.layer_args(a["layer_preset"], int(a["heads"]))
    e_out, e_lse = _errors(name, stored_inputs=True, scale=config.softmax_scale_exact(args.qk_head_dim))
    assert e_out > T.CHECK_BF16_REL and e_lse > T.CHECK_BF16_REL


@pytest.mark.parametrize("name", _layer_cases())
def test_head_cut_is_the_full_layer_case(name):
    """Sequence 0 starts with the prefill tokens of the full_layer case of the same preset and seed;
    its fp64 attn_out there, first `heads` heads, is the cut layer's attention of those tokens."""
    a, q, k, v, cu_q, cu_k, out, _ = _case(name)
    with h5py.File(FULL_LAYER, "r") as f:
        match = [c for c in f["cases"].values()
                 if c.attrs["preset"] == a["layer_preset"] and c.attrs["seed"] == a["seed"]]
        assert len(match) == 1, f"{name}: no full_layer case of preset {a['layer_preset']} seed {a['seed']}"
        fl = match[0]["steps/0/fp64/naive/attn_out"][()]  # [b, s, 16, d_v]
    s_q, s_k = _seqs(cu_q, cu_k)[0]
    n = min(fl.shape[1], s_k)
    args, w = _layer(a["layer_preset"], int(a["heads"]), int(a["seed"]))
    x = prefill_cases.layer_tokens(args, int(a["seed"]), 0, s_k)[:, :n]
    o, _ = _layer_attention(args, w, x, n)
    want = fl[0, :n, :int(a["heads"])]
    assert _rel(o, want) <= T.CORE_VS_LAYER_FP64_REL
    if s_q == s_k:  # the case's own truth of those tokens (causal: they see only each other)
        assert _rel(out[:n], want) <= T.CHECK_BF16_REL
