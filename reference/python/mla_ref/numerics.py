"""Exact codecs: bfloat16 bits, float8 e4m3fn, and the 656-byte FP8 KV-cache token (SCHEMA.md).

Everything here is integer / exact-float64 numpy arithmetic, so it does not depend on torch's
bf16 or float8 kernels (torch 1.13 has no float8 dtypes).
"""
from __future__ import annotations

import numpy as np
import torch

# ---------------------------------------------------------------- bfloat16

BF16_QNAN = np.uint16(0x7FC0)


def bf16_bits_from_f32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (round-to-nearest-even); NaN -> quiet NaN, sign kept."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    nan = np.isnan(x)
    with np.errstate(over="ignore"):
        r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    r = r.astype(np.uint16)
    if nan.any():
        r[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return r


def bf16_bits_from_f64(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 (RNE) -> bfloat16 (RNE), the schema's rule."""
    return bf16_bits_from_f32(np.asarray(x, dtype=np.float64).astype(np.float32))


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    b = np.ascontiguousarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_bits_to_f64(b: np.ndarray) -> np.ndarray:
    return bf16_bits_to_f32(b).astype(np.float64)


def round_bf16_np(x: np.ndarray) -> np.ndarray:
    """float64 array -> float64 array of the nearest bf16 values (schema rule)."""
    return bf16_bits_to_f64(bf16_bits_from_f64(x))


def round_bf16(t: torch.Tensor) -> torch.Tensor:
    """Round a float32 torch tensor to bf16 values, kept as float32 (the bf16 pipeline's rounding
    points). torch's float->bfloat16 conversion is round-to-nearest-even."""
    assert t.dtype == torch.float32
    return t.to(torch.bfloat16).to(torch.float32)


# ---------------------------------------------------------------- float8 e4m3fn
# bias 7, 4 exponent bits, 3 mantissa bits, no infinities, 0x7F/0xFF NaN, max finite 448,
# smallest subnormal 2^-9. Encoding: RNE, finite overflow (and +-inf) saturates to +-448.

E4M3_MAX = 448.0
E4M3_NAN = 0x7F


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """uint8 codes -> float64 values (exact)."""
    c = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 0xF
    m = c & 0x7
    sub = np.ldexp(m.astype(np.float64), -9)
    norm = np.ldexp(1.0 + m / 8.0, (e - 7).astype(np.int64))
    v = sign * np.where(e == 0, sub, norm)
    v = np.where((e == 15) & (m == 7), np.copysign(np.nan, sign), v)
    return v


E4M3_TABLE = e4m3_decode(np.arange(256, dtype=np.uint8))


def e4m3_encode(x: np.ndarray) -> np.ndarray:
    """float64 (or float32) values -> uint8 e4m3fn codes, exact round-to-nearest-even.

    Every step is exact in float64: |x| is scaled by a power of two so that the e4m3 quantum at
    its binade is 1, rounded half-to-even with rint, scaled back, saturated, then split into
    exponent and mantissa fields with integer arithmetic."""
    x = np.asarray(x, dtype=np.float64)
    nan = np.isnan(x)
    neg = np.signbit(x)
    a = np.abs(np.where(nan, 0.0, x))
    a = np.minimum(a, 1e300)  # inf saturates below
    _, ex = np.frexp(a)  # a = f * 2^ex, f in [0.5, 1)
    ex = ex.astype(np.int64) - 1  # a in [2^ex, 2^(ex+1))
    ex = np.maximum(ex, -6)  # below 2^-6 the quantum is the subnormal one, 2^-9
    q = np.ldexp(a, (3 - ex))  # a / quantum, quantum = 2^(ex-3)
    n = np.rint(q)  # round half to even (exact)
    r = np.ldexp(n, (ex - 3))  # the representable value (exact)
    r = np.minimum(r, E4M3_MAX)  # saturate
    # split r into code fields: r < 2^-6 -> subnormal m = r / 2^-9 (r == 2^-6 gives m = 8 = 0x08,
    # which is also the code of the smallest normal, so the formula is continuous)
    _, ex2 = np.frexp(r)
    ex2 = ex2.astype(np.int64) - 1
    is_sub = r < 2.0 ** -6
    sub_code = np.ldexp(r, 9)
    mant = np.ldexp(r, -ex2) * 8.0 - 8.0  # in 0..7 for normal r
    norm_code = (ex2 + 7) * 8 + mant
    code = np.where(is_sub, sub_code, norm_code).astype(np.int64)
    code = np.where(neg, code | 0x80, code)
    # A NaN keeps its sign (0x7F / 0xFF), as a float8 cast does; the cache quantizer stores
    # every NaN quotient as 0x7F (SCHEMA.md) so its bytes never depend on a NaN's sign.
    code = np.where(nan, np.where(neg, E4M3_NAN | 0x80, E4M3_NAN), code)
    return code.astype(np.uint8)


# ---------------------------------------------------------------- FP8 KV cache (656 B / token)

FP8_TOKEN_BYTES = 656
LATENT = 512
ROPE = 64
BLOCK = 128
SCALE_FMTS = ("fp32", "ue8m0")
# FP8 scale recipes (SCHEMA.md, "FP8 scale recipes"; docs/field.md, "Two FP8 scale recipes"):
#   deepseek_v32  DeepSeek V3.2 inference: max(amax, 1e-4) / 448, clamp then divide
#   flashmla      FlashMLA's quantizer and vLLM's fp8_ds_mla writer: max(amax / 448, 1e-4)
FP8_RECIPES = ("deepseek_v32", "flashmla")
DEFAULT_FP8_RECIPE = "deepseek_v32"  # what every FP8 golden used before recipes had names
AMAX_FLOOR = np.float32(1e-4)


def fp8_block_scale(amax: np.ndarray, scale_fmt: str, recipe: str = DEFAULT_FP8_RECIPE) -> np.ndarray:
    """The float32 block scale of `recipe` for block maxima `amax` (rounded to float32 first),
    every operation in float32; ue8m0: the smallest power of two >= that scale (exact)."""
    amax = np.asarray(amax, dtype=np.float32)
    if recipe == "deepseek_v32":
        s = (np.maximum(amax, AMAX_FLOOR) / np.float32(448.0)).astype(np.float32)
    elif recipe == "flashmla":
        s = np.maximum((amax / np.float32(448.0)).astype(np.float32), AMAX_FLOOR).astype(np.float32)
    else:
        raise ValueError(f"unknown FP8 recipe {recipe!r}; known: {', '.join(FP8_RECIPES)}")
    return _apply_scale_fmt(s, scale_fmt)


def _apply_scale_fmt(s: np.ndarray, scale_fmt: str) -> np.ndarray:
    """fp32: `s` as it is; ue8m0: the smallest power of two >= s (exact; non-finite s kept)."""
    if scale_fmt == "ue8m0":
        f, e = np.frexp(s)  # s = f * 2^e, f in [0.5, 1)
        with np.errstate(invalid="ignore"):
            up = np.ldexp(np.float32(1.0), e).astype(np.float32)
        s = np.where((f == 0.5) | ~np.isfinite(s), s, up).astype(np.float32)
    elif scale_fmt != "fp32":
        raise ValueError(f"unknown scale_fmt {scale_fmt!r}; known: {', '.join(SCALE_FMTS)}")
    return s


def fp8_recipes_differ(amax: np.ndarray, scale_fmt: str) -> np.ndarray:
    """Where the two recipes give different scales for block maxima `amax`."""
    return fp8_block_scale(amax, scale_fmt, "deepseek_v32") != fp8_block_scale(amax, scale_fmt, "flashmla")


def fp8_quantize(latent: np.ndarray, rope: np.ndarray, scale_fmt: str, recipe: str = DEFAULT_FP8_RECIPE) -> np.ndarray:
    """Quantize tokens: latent [..., 512] and rope [..., 64] (values; both are rounded to float32
    first, rope then to bf16) -> uint8 [..., 656].

    Per 128-value block: amax = max|x|, scale as fp8_block_scale, code = e4m3(float32(x / scale))
    with the division done in float32 (correctly rounded), RNE, saturating."""
    lat = np.asarray(latent, dtype=np.float64).astype(np.float32)
    lead = lat.shape[:-1]
    assert lat.shape[-1] == LATENT and np.asarray(rope).shape == lead + (ROPE,)
    blocks = lat.reshape(lead + (LATENT // BLOCK, BLOCK))
    amax = np.max(np.abs(blocks), axis=-1)
    scale = fp8_block_scale(amax, scale_fmt, recipe)  # [..., 4] float32
    q = (blocks / scale[..., None]).astype(np.float32)
    q64 = q.astype(np.float64)
    codes = np.where(np.isnan(q64), E4M3_NAN, e4m3_encode(q64)).astype(np.uint8).reshape(lead + (LATENT,))
    out = np.empty(lead + (FP8_TOKEN_BYTES,), dtype=np.uint8)
    out[..., :LATENT] = codes
    out[..., LATENT:LATENT + 16] = np.ascontiguousarray(scale.astype("<f4")).view(np.uint8).reshape(lead + (16,))
    rb = bf16_bits_from_f64(np.asarray(rope, dtype=np.float64)).astype("<u2")
    out[..., LATENT + 16:] = np.ascontiguousarray(rb).view(np.uint8).reshape(lead + (2 * ROPE,))
    return out


def fp8_dequantize(tokens: np.ndarray) -> np.ndarray:
    """uint8 [..., 656] -> float64 [..., 576] = [e4m3 value * scale (exact) | rope bf16]."""
    t = np.ascontiguousarray(tokens, dtype=np.uint8)
    lead = t.shape[:-1]
    assert t.shape[-1] == FP8_TOKEN_BYTES
    vals = E4M3_TABLE[t[..., :LATENT].astype(np.int64)].reshape(lead + (LATENT // BLOCK, BLOCK))
    scale = np.ascontiguousarray(t[..., LATENT:LATENT + 16]).view("<f4").reshape(lead + (4,)).astype(np.float64)
    lat = (vals * scale[..., None]).reshape(lead + (LATENT,))
    rope = bf16_bits_to_f64(np.ascontiguousarray(t[..., LATENT + 16:]).view("<u2").reshape(lead + (ROPE,)))
    return np.concatenate([lat, rope], axis=-1)


def fp8_poison_token() -> np.ndarray:
    """An unused FP8 slot: latent bytes 0x7F (NaN), scales float32 NaN, rope bf16 NaN."""
    tok = np.empty(FP8_TOKEN_BYTES, dtype=np.uint8)
    tok[:LATENT] = E4M3_NAN
    tok[LATENT:LATENT + 16] = np.full(4, np.nan, dtype="<f4").view(np.uint8)
    tok[LATENT + 16:] = np.full(ROPE, 0x7FC0, dtype="<u2").view(np.uint8)
    return tok


# ---------------------------------------------------------------- activation quantizer (act_quant)
# DeepSeek V3.2's activation quantizer (inference `kernel.py` act_quant), used by the lightning
# indexer on q and k. Its scale differs from both cache recipes above in one operation: it
# multiplies by the float32 reciprocal 1/448 instead of dividing by 448, so with float32 scales
# about half of all blocks get a scale one ulp away from `deepseek_v32`'s. With ue8m0 scales the
# two coincide (the product and the quotient never straddle a power of two for a float32 amax).

E4M3_MAX_INV = np.float32(1.0 / 448.0)  # the constant as the kernel holds it: 1/448 rounded to float32


def act_quant_scale(amax: np.ndarray, scale_fmt: str) -> np.ndarray:
    """float32 block scale of act_quant for block maxima `amax` (rounded to float32 first):
    float32(max(amax, 1e-4) * float32(1/448)); ue8m0: then the smallest power of two >= it,
    which is what the kernel's exponent-bit ceil(log2) gives for these (normal) values."""
    amax = np.asarray(amax, dtype=np.float32)
    s = (np.maximum(amax, AMAX_FLOOR) * E4M3_MAX_INV).astype(np.float32)
    return _apply_scale_fmt(s, scale_fmt)


def act_quant(x: np.ndarray, scale_fmt: str, block: int = BLOCK):
    """Block-wise e4m3 quantization of the last axis, as act_quant does it.

    x: finite values [..., n] with n a multiple of `block` (rounded to float32 first; bf16 values,
    what the kernel reads, are unchanged by that). Per block: amax = max|x|, scale as
    act_quant_scale, code = e4m3(clamp(float32(x / scale), -448, 448)) rounded to nearest even.
    Returns (codes uint8 [..., n], scales float32 [..., n / block]); value = E4M3_TABLE[code] * scale."""
    x32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    if x32.ndim == 0 or x32.shape[-1] % block != 0:
        raise ValueError(f"act_quant: shape {x32.shape}: the last dimension must be a multiple of the block {block}")
    if not np.isfinite(x32).all():
        raise ValueError("act_quant: input holds a non-finite value (the kernel's scale would be NaN/inf)")
    lead, n = x32.shape[:-1], x32.shape[-1]
    blocks = x32.reshape(lead + (n // block, block))
    scale = act_quant_scale(np.max(np.abs(blocks), axis=-1), scale_fmt)
    q = np.clip((blocks / scale[..., None]).astype(np.float32), -E4M3_MAX, E4M3_MAX)
    return e4m3_encode(q.astype(np.float64)).reshape(lead + (n,)), scale


def act_dequant(codes: np.ndarray, scales: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """float64 values of act_quant's output (exact: an e4m3 value times a float32 scale)."""
    c = np.asarray(codes, dtype=np.uint8)
    lead, n = c.shape[:-1], c.shape[-1]
    vals = E4M3_TABLE[c.astype(np.int64)].reshape(lead + (n // block, block))
    return (vals * np.asarray(scales, dtype=np.float64)[..., None]).reshape(lead + (n,))
