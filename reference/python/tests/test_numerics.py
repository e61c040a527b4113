import numpy as np
import pytest
import torch

from mla_ref import numerics as N

KNOWN = [  # value, e4m3fn code
    (448.0, 0x7E), (-448.0, 0xFE), (2.0 ** -9, 0x01), (-(2.0 ** -9), 0x81), (2.0 ** -6, 0x08),
    (1.0, 0x38), (0.5, 0x30), (1.125, 0x39), (0.0, 0x00), (-0.0, 0x80), (240.0, 0x77), (256.0, 0x78),
    (7 * 2.0 ** -9, 0x07), (0.875 * 2.0 ** -6, 0x07),
    # ties to even
    (1.0625, 0x38), (1.1875, 0x3A), (3 * 2.0 ** -10, 0x02), (5 * 2.0 ** -10, 0x02), (432.0, 0x7E), (416.0, 0x7D),
    # saturation (finite overflow and infinities)
    (464.0, 0x7E), (480.0, 0x7E), (1e9, 0x7E), (-1e9, 0xFE), (np.inf, 0x7E), (-np.inf, 0xFE), (449.0, 0x7E),
    # NaN
    (np.nan, 0x7F), (-np.nan, 0xFF),
    # underflow: below 2^-10 -> 0, exactly 2^-10 -> 0 (tie to even), just above -> 0x01
    (2.0 ** -11, 0x00), (2.0 ** -10, 0x00), (-(2.0 ** -10), 0x80), (2.0 ** -10 * (1 + 2.0 ** -20), 0x01),
    (1e-30, 0x00),
    # rounding up across a binade
    (1.9375, 0x40), (0.984375, 0x38),
]


def test_e4m3_known_encodings():
    vals = np.array([v for v, _ in KNOWN])
    codes = N.e4m3_encode(vals)
    for (v, want), got in zip(KNOWN, codes):
        assert got == want, f"e4m3({v!r}) = {got:#04x}, want {want:#04x}"


def test_e4m3_decode_table():
    t = N.E4M3_TABLE
    assert t[0x7E] == 448.0 and t[0xFE] == -448.0 and t[0x01] == 2.0 ** -9 and t[0x08] == 2.0 ** -6
    assert t[0x38] == 1.0 and np.isnan(t[0x7F]) and np.isnan(t[0xFF])
    assert np.isnan(t).sum() == 2
    fin = t[~np.isnan(t)]
    assert np.abs(fin).max() == 448.0


def test_e4m3_round_trip_all_codes():
    codes = np.arange(256, dtype=np.uint8)
    back = N.e4m3_encode(N.E4M3_TABLE)
    for c in range(256):
        assert back[c] == codes[c], hex(c)


def test_e4m3_rne_exhaustive_midpoints():
    # every midpoint between consecutive positive codes goes to the even code
    t = N.E4M3_TABLE[:0x7F]
    mids = (t[:-1] + t[1:]) / 2
    got = N.e4m3_encode(mids)
    lo = np.arange(0x7E)
    want = np.where(lo % 2 == 0, lo, lo + 1)
    assert np.array_equal(got, want)
    # and just off the midpoints
    assert np.array_equal(N.e4m3_encode(np.nextafter(mids, 0)), lo)
    assert np.array_equal(N.e4m3_encode(np.nextafter(mids, 1e9)), lo + 1)


def test_bf16_rounding_matches_torch():
    x = np.concatenate([np.random.default_rng(0).standard_normal(10000) * 10.0 ** np.arange(-20, 20, 0.004)[:10000],
                        [0.0, -0.0, 1.0, 3.0e38, -3.4e38, np.inf, -np.inf, 1.00390625, 1.01171875]]).astype(np.float32)
    ours = N.bf16_bits_from_f32(x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours, theirs)
    assert N.bf16_bits_from_f32(np.array([1.00390625], np.float32))[0] == 0x3F80  # tie -> even
    assert N.bf16_bits_from_f32(np.array([1.01171875], np.float32))[0] == 0x3F82  # tie -> even (up)
    nan = N.bf16_bits_from_f32(np.array([np.nan, -np.nan], np.float32))
    assert nan[0] == 0x7FC0 and nan[1] == 0xFFC0


def test_bf16_double_rounding_rule():
    # float64 -> float32 -> bf16 (the schema rule): 1 + 2^-8 + 2^-30 rounds to float32 1 + 2^-8
    # (a tie in bf16 -> even 1.0), although a direct rounding would go up
    x = np.array([1.0 + 2.0 ** -8 + 2.0 ** -30])
    assert N.bf16_bits_from_f64(x)[0] == 0x3F80


def _token(lat, rope=None):
    rope = np.zeros(64) if rope is None else rope
    return N.fp8_quantize(np.asarray(lat, np.float64)[None], np.asarray(rope, np.float64)[None], "fp32")[0]


def test_fp8_special_blocks():
    rng = np.random.default_rng(1)
    lat = N.round_bf16_np(rng.uniform(-1, 1, 512))
    lat[0], lat[1] = 1.75, -1.75  # block 0: scale 1.75/448 = 2^-8 exactly
    lat[129:136] = np.arange(1, 8) * 2.0 ** -17
    lat[128] = 1.75
    lat[136] = 2.0 ** -18
    lat[256:384] = N.round_bf16_np(lat[256:384] * 5e-5)  # amax < 1e-4
    lat[384:512] = 0.0
    for fmt in N.SCALE_FMTS:
        tok = N.fp8_quantize(lat[None], np.linspace(-1, 1, 64)[None], fmt)[0]
        scales = tok[512:528].view("<f4")
        assert scales[0] == 2.0 ** -8 and scales[1] == 2.0 ** -8  # exact power of two either way
        assert tok[0] == 0x7E and tok[1] == 0xFE
        assert list(tok[129:136]) == [1, 2, 3, 4, 5, 6, 7] and tok[136] == 0
        if fmt == "fp32":
            assert scales[2] == np.float32(np.float32(1e-4) / np.float32(448))
            assert scales[3] == np.float32(np.float32(1e-4) / np.float32(448))
        else:
            s = np.float32(np.float32(1e-4) / np.float32(448))
            assert scales[2] == 2.0 ** np.ceil(np.log2(s)) and scales[3] == scales[2]
        assert np.all(tok[384:512] == 0)
        deq = N.fp8_dequantize(tok[None])[0]
        assert np.array_equal(deq[512:], N.round_bf16_np(np.linspace(-1, 1, 64)))
        assert np.array_equal(deq[:512], N.E4M3_TABLE[tok[:512]] * np.repeat(scales.astype(np.float64), 128))
        # quantization error bound: half an e4m3 ulp (relative 2^-4) or half the subnormal step
        err = np.abs(deq[:512] - lat)
        bound = np.maximum(np.abs(lat) * 2.0 ** -4, np.repeat(scales.astype(np.float64), 128) * 2.0 ** -10)
        assert np.all(err <= bound * (1 + 1e-6))


def test_fp8_ue8m0_rounds_scale_up():
    s = N.fp8_block_scale(np.array([1.0, 448.0, 449.0, 0.0, 1e-5, 3.5]), "ue8m0")
    f = N.fp8_block_scale(np.array([1.0, 448.0, 449.0, 0.0, 1e-5, 3.5]), "fp32")
    m, e = np.frexp(s)
    assert np.all(m == 0.5) and np.all(s >= f) and np.all(s < 2 * f)
    assert s[1] == 1.0 and f[1] == 1.0


def test_fp8_saturation_and_poison():
    lat = np.zeros(512)
    lat[0] = 3.0
    tok = _token(lat)
    assert tok[0] == 0x7E
    p = N.fp8_poison_token()
    d = N.fp8_dequantize(p[None])[0]
    assert np.isnan(d).all() and len(p) == N.FP8_TOKEN_BYTES == 656


# ---------------------------------------------------------------- FP8 scale recipes

def test_fp8_recipes_zero_block():
    # docs/field.md: a zero block gets 1e-4/448 (ue8m0 2^-22) from DeepSeek, 1e-4 (2^-13) from FlashMLA
    z = np.zeros(1)
    assert N.fp8_block_scale(z, "fp32", "deepseek_v32")[0] == np.float32(np.float32(1e-4) / np.float32(448))
    assert N.fp8_block_scale(z, "fp32", "flashmla")[0] == np.float32(1e-4)
    assert N.fp8_block_scale(z, "ue8m0", "deepseek_v32")[0] == 2.0 ** -22
    assert N.fp8_block_scale(z, "ue8m0", "flashmla")[0] == 2.0 ** -13
    assert N.fp8_block_scale(z, "fp32")[0] == N.fp8_block_scale(z, "fp32", "deepseek_v32")[0]  # the default
    with pytest.raises(ValueError, match="deepseek_v32, flashmla"):
        N.fp8_block_scale(z, "fp32", "vllm")


def test_fp8_recipes_differ_exactly_below_the_crossover():
    """Walk every float32 in [0.02, 0.05] plus a log sweep: one threshold per scale format, found
    from the data, below which the recipes differ and at or above which they agree."""
    lo, hi = np.float32(0.02).view(np.uint32), np.float32(0.05).view(np.uint32)
    a = np.concatenate([[0.0], np.arange(lo, hi + 1, dtype=np.uint32).view(np.float32),
                        np.exp2(np.arange(-30, 20, 1 / 64))]).astype(np.float32)
    for fmt, lo_t, hi_t in (("fp32", 0.04479, 0.04481), ("ue8m0", 0.02734375, 0.02734376)):
        d = N.fp8_recipes_differ(a, fmt)
        last_diff, first_same = a[d].max(), a[~d].min()
        assert np.nextafter(last_diff, np.float32(1)) == first_same, fmt
        assert lo_t <= (first_same if fmt == "fp32" else last_diff) <= hi_t, (fmt, last_diff, first_same)
        same = ~d
        np.testing.assert_array_equal(N.fp8_block_scale(a[same], fmt, "flashmla"),
                                      N.fp8_block_scale(a[same], fmt, "deepseek_v32"))
    assert N.fp8_recipes_differ(np.float32(448.0 * 2.0 ** -14), "ue8m0")  # DeepSeek's scale is 2^-14 there


def test_fp8_recipes_tokens_differ_only_in_tiny_blocks():
    rng = np.random.default_rng(4)
    lat = N.round_bf16_np(rng.uniform(-1, 1, 512))
    lat[:128] = N.round_bf16_np(lat[:128] * 0.01)  # amax < 0.0448
    lat[128:256] = 0.0
    lat[384:512] = N.round_bf16_np(lat[384:512] * 0.02)
    lat[384] = 0.046875  # just above the crossover
    rope = np.linspace(-1, 1, 64)
    for fmt in N.SCALE_FMTS:
        a = N.fp8_quantize(lat[None], rope[None], fmt, "deepseek_v32")[0]
        b = N.fp8_quantize(lat[None], rope[None], fmt, "flashmla")[0]
        assert np.array_equal(a, N.fp8_quantize(lat[None], rope[None], fmt)[0])
        for t, want in enumerate((True, True, False, False)):
            blk = np.r_[np.arange(128 * t, 128 * t + 128), 512 + 4 * t + np.arange(4)]
            assert (not np.array_equal(a[blk], b[blk])) == want, (fmt, t)
        assert np.array_equal(a[528:], b[528:])
        assert np.all(b[128:256] == 0) and b[512 + 4:512 + 8].view("<f4")[0] == (2.0 ** -13 if fmt == "ue8m0" else np.float32(1e-4))
