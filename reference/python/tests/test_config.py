import math
from fractions import Fraction

import numpy as np
import pytest

from mla_ref import config, rope
from mla_ref import tolerances as T


def test_softmax_scale_constants():
    # docs/field.md, "Upstream semantics": mscale 1.0 -> 0.1352337789, mscale 0.707 -> 0.1147213868
    # (YaRN on: 16384 > 4096)
    assert abs(config.preset("v3").softmax_scale - 0.1352337789) < T.SOFTMAX_SCALE_ABS
    for p in ("v3-tp2", "v3-tp4", "v3-tp8"):
        assert config.preset(p).softmax_scale == config.preset("v3").softmax_scale
    assert abs(config.preset("v2-lite").softmax_scale - 0.1147213868) < T.SOFTMAX_SCALE_ABS
    # YaRN off: plain (nope+rope)^-0.5
    a = config.preset("tiny-noyarn")
    assert not a.yarn and a.softmax_scale == 24 ** -0.5
    assert config.preset("tiny").yarn


def test_presets():
    v3 = config.preset("v3")
    assert (v3.dim, v3.n_heads, v3.q_lora_rank, v3.kv_lora_rank, v3.qk_nope_head_dim, v3.qk_rope_head_dim,
            v3.v_head_dim, v3.mscale) == (7168, 128, 1536, 512, 128, 64, 128, 1.0)
    assert [config.preset(p).n_heads for p in ("v3-tp2", "v3-tp4", "v3-tp8")] == [64, 32, 16]
    lite = config.preset("v2-lite")
    assert (lite.dim, lite.n_heads, lite.q_lora_rank, lite.mscale) == (2048, 16, 0, 0.707)
    d = config.ModelArgs()
    assert (d.max_seq_len, d.original_seq_len, d.rope_theta, d.rope_factor, d.beta_fast, d.beta_slow, d.mscale) == \
        (16384, 4096, 10000.0, 40.0, 32.0, 1.0, 1.0)
    with pytest.raises(KeyError):
        config.preset("nope")


def test_yarn_ramp_dims_real_configs():
    assert rope.find_correction_range(32, 1, 64, 10000.0, 4096) == (10, 23)


def _closed_form(args):
    """YaRN by the formula, element by element (no numpy vector ops)."""
    dim = args.qk_rope_head_dim
    base = args.rope_theta
    out = []
    def corr(rot):
        return dim * math.log(args.original_seq_len / (rot * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(corr(args.beta_fast)), 0)
    high = min(math.ceil(corr(args.beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    for i in range(dim // 2):
        f = 1.0 / base ** (2 * i / dim)
        if args.max_seq_len > args.original_seq_len:
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: keep, 1: divide by factor
            f = f / args.rope_factor * ramp + f * (1 - ramp)
        out.append(f)
    return np.array(out)


def _is_correctly_rounded_power(f: float, theta: int, num: int, den: int) -> bool:
    """f is the float64 nearest to theta^(-num/den): the two midpoints around f bracket the exact
    value, checked in integer arithmetic (m^den vs theta^-num as Fractions)."""
    lo = (Fraction(f) + Fraction(np.nextafter(f, 0))) / 2
    hi = (Fraction(f) + Fraction(np.nextafter(f, 2))) / 2
    want = Fraction(1, theta ** num) if num >= 0 else Fraction(theta ** -num)
    return lo ** den <= want <= hi ** den


@pytest.mark.parametrize("name", list(config.PRESETS))
def test_yarn_inv_freq_closed_form(name):
    a = config.preset(name)
    got, want = rope.inv_freq(a), _closed_form(a)
    # the library's pow differs from the correctly rounded value by at most an ulp or two
    assert np.allclose(got, want, rtol=T.YARN_FREQ_REL * 4, atol=0)
    dim = a.qk_rope_head_dim
    if a.yarn and dim == 64:
        base = 1.0 / 10000.0 ** (np.arange(0, 64, 2) / 64)
        assert np.allclose(got[:10], base[:10], rtol=1e-15)  # below low: unchanged
        assert np.allclose(got[23:], base[23:] / 40.0, rtol=1e-15)  # above high: divided by the factor
        ulps = 1 + 4 * 2.0 ** -52  # base is the library pow: within an ulp or two
        assert np.all((got[10:23] <= base[10:23] * ulps) & (got[10:23] >= base[10:23] / 40.0 / ulps))
    # Where no ramp applies the entry is theta^(-2i/dim) itself: exactly the correctly rounded value
    # (checked in integers, independently of mla_ref.exact), whatever the platform's pow says.
    theta = int(a.rope_theta)
    assert theta == a.rope_theta
    plain = range(dim // 2) if not a.yarn else range(rope.find_correction_range(
        a.beta_fast, a.beta_slow, dim, a.rope_theta, a.original_seq_len)[0])
    for i in plain:
        assert _is_correctly_rounded_power(float(got[i]), theta, 2 * i, dim), (name, i)


def test_yarn_min_equals_max_rule():
    # a config whose correction range collapses to one point exercises the +0.001 rule
    a = config.ModelArgs(qk_rope_head_dim=8, original_seq_len=2, max_seq_len=64, rope_theta=10000.0)
    lo, hi = rope.find_correction_range(a.beta_fast, a.beta_slow, 8, a.rope_theta, a.original_seq_len)
    assert lo == hi == 0
    r = rope.linear_ramp(lo, hi, 4)
    assert np.allclose(r, [0.0, 1.0, 1.0, 1.0])
    assert np.allclose(rope.inv_freq(a), _closed_form(a), rtol=1e-15)


def test_kv_bytes_per_token():
    v3, tp8 = config.preset("v3"), config.preset("v3-tp8")
    assert config.kv_bytes_per_token(v3, "naive_bf16") == 81920
    assert config.kv_bytes_per_token(tp8, "naive_bf16") == 10240
    assert config.kv_bytes_per_token(config.preset("v2-lite"), "naive_bf16") == 10240
    assert config.kv_bytes_per_token(config.preset("v3-tp4"), "naive_bf16") == 20480
    assert config.kv_bytes_per_token(config.preset("v3-tp2"), "naive_bf16") == 40960
    for p in ("v3", "v3-tp2", "v3-tp4", "v3-tp8", "v2-lite"):
        a = config.preset(p)
        assert config.kv_bytes_per_token(a, "mla_bf16") == 1152
        assert config.kv_bytes_per_token(a, "latent_bf16") == 1024
        assert config.kv_bytes_per_token(a, "fp8_v32") == 656
