// Device code of the paged-cache append: a check pass that flags every token past capacity,
// then a write pass (one warp per token, bf16 or FP8 layout) that does nothing if anything was
// flagged. Written against detail/device_compat.cuh so that the warp simulator (suites/gpu/sim)
// runs the same source on the host; production code includes it from cache_append.cu only.
#pragma once

#include <cstdint>
#include <cstring>

#include "detail/cache_append_launch.hpp"
#include "detail/device_compat.cuh"

namespace mla::cuda::detail::append {
MLA_SIM_NAMESPACE_BEGIN

constexpr int kTokensPerBlock = 4;  // one warp each

constexpr int kLatent = 512, kRope = 64, kD = 576;

MLA_GLOBAL void append_check_kernel(const CacheAppendArgs a, int* flag) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.num_tokens) return;
  const int seq = a.seq_ids[i];
  const int pos = a.positions[i];
  int code = 0;
  if (seq < 0 || seq >= a.batch || pos < 0) {
    code = kAppendBadArgument;
  } else if (pos >= a.max_seq_len) {
    code = kAppendPastMaxSeqLen;
  } else {
    const int page = pos / a.page_size;
    if (page >= a.max_blocks) {
      code = kAppendPastBlockTable;
    } else {
      const int32_t blk = a.block_table[int64_t{seq} * a.max_blocks + page];
      if (blk < 0 || blk >= a.num_blocks) code = kAppendPageMissing;
    }
  }
  if (code != 0) {
    MLA_ATOMIC_OR(&flag[0], code);
    MLA_ATOMIC_MIN(&flag[code == kAppendBadArgument ? 1 : 2], i);
  }
}

MLA_DEV float load_act(const CacheAppendArgs& a, const void* base, int64_t idx) {
  if (a.dtype == ActivationDType::f32) return static_cast<const float*>(base)[idx];
  return __bfloat162float(__ushort_as_bfloat16(static_cast<const uint16_t*>(base)[idx]));
}

MLA_DEV uint16_t to_bf16(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

MLA_DEV float bf16_value(uint16_t bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }

// ---- FP8 (e4m3fn) encoding, bit-exact with core's fp8_quantize_token -----------------------

constexpr int kFp8TokenBytes = 656;  // [512 e4m3 | 4 float32 scales | 64 bf16]
constexpr int kFp8Block = 128;       // values per scale
constexpr float kE4m3Max = 448.f;
constexpr float kScaleFloor = 1e-4f;  // amax floor (DeepSeek's; FlashMLA's test floors amax/448)
constexpr uint8_t kE4m3NaN = 0x7F;

// Deliberate defects, each a mistake an encoder can make that still looks plausible; the tests
// instantiate them to prove the byte checks catch it. Production code uses none.
enum class Fp8Defect { none, round_toward_zero, nan_on_overflow, no_scale_floor };

#if defined(MLA_HOST_SIM)
MLA_DEV uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
MLA_DEV float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
// The host's division is IEEE round-to-nearest (SSE), as core's is.
MLA_DEV float div_rn(float x, float y) { return x / y; }
#else
MLA_DEV uint32_t float_bits(float x) { return __float_as_uint(x); }
MLA_DEV float bits_float(uint32_t u) { return __uint_as_float(u); }
// Correctly rounded whatever the build's flags (-use_fast_math would make `/` approximate and
// the bytes differ from the goldens).
MLA_DEV float div_rn(float x, float y) { return __fdiv_rn(x, y); }
#endif

// max that propagates NaN, whatever the operand order: a NaN anywhere in a block makes its
// scale NaN (core's rule), where fmaxf would drop it.
MLA_DEV float nan_max(float m, float x) { return (x > m || x != x) ? x : m; }

template <Fp8Defect D>
MLA_DEV float fp8_scale(float amax, Fp8ScaleFmt fmt) {
  if (amax != amax) return bits_float(0x7FC00000u);  // the canonical quiet NaN core stores
  const float floored = (D == Fp8Defect::no_scale_floor || amax >= kScaleFloor) ? amax : kScaleFloor;
  const float scale = div_rn(floored, kE4m3Max);
  if (fmt == Fp8ScaleFmt::fp32) return scale;
  // ue8m0: the smallest power of two >= scale, from the bits (a log2/exp2 pair may round). An
  // infinite scale has a zero mantissa and stays; a carry into exponent 255 gives +inf, as
  // ldexp does in core.
  const uint32_t u = float_bits(scale);
  if ((u & 0x7FFFFFu) == 0) return scale;
  return bits_float((u & 0x7F800000u) + 0x00800000u);
}

template <Fp8Defect D>
MLA_DEV uint8_t e4m3_encode(float q) {
  if (q != q) return kE4m3NaN;  // positive NaN code whatever the quotient's sign, as core does
  const uint32_t u = float_bits(q);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const float mag = bits_float(u & 0x7FFFFFFFu);
  if (mag > kE4m3Max) {  // infinities included: e4m3fn has none
    return static_cast<uint8_t>((D == Fp8Defect::nan_on_overflow ? kE4m3NaN : 0x7E) | sign);
  }
  if (mag < 0.015625f) {  // below 2^-6: the subnormal grid, multiples of 2^-9 (scaling is exact)
    const float steps = mag * 512.f;
    const float r = D == Fp8Defect::round_toward_zero ? truncf(steps) : rintf(steps);  // rintf: ties to even
    return static_cast<uint8_t>(static_cast<uint32_t>(r) | sign);  // r == 8 is the smallest normal's code
  }
  const uint32_t m = u & 0x7FFFFFu;
  uint32_t exp_field = ((u >> 23) & 0xFFu) - 127u + 7u;  // in [1, 15] here
  uint32_t mant = m >> 20;
  const uint32_t rest = m & 0xFFFFFu;
  if (D != Fp8Defect::round_toward_zero && (rest > 0x80000u || (rest == 0x80000u && (mant & 1u)))) ++mant;
  if (mant == 8u) {
    mant = 0;
    ++exp_field;
  }
  // mag <= 448 keeps the code at or below 0x7E: never the NaN code.
  return static_cast<uint8_t>(((exp_field << 3) | mant) | sign);
}

// Reduces a per-lane value over the warp with nan_max (every lane ends with the result).
MLA_DEV float warp_nan_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, MLA_SHFL_XOR(v, o));
  return v;
}

// One warp per token. The token is first produced in bf16 (identical for both cache formats):
// lane holds latent elements lane + 32k and the rope pair (2·lane, 2·lane+1).
template <Fp8Defect D = Fp8Defect::none>
MLA_GLOBAL void MLA_BOUNDS(32 * kTokensPerBlock, 1)
    append_write_kernel(const CacheAppendArgs a, const int* flag) {
  if (flag[0] != 0) return;  // all or nothing: a rejected call leaves the cache as it was
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * kTokensPerBlock + (threadIdx.x >> 5);
  if (i >= a.num_tokens) return;
  const int seq = a.seq_ids[i];
  const int pos = a.positions[i];
  const int32_t blk = a.block_table[int64_t{seq} * a.max_blocks + pos / a.page_size];
  const int64_t slot = int64_t{blk} * a.page_size + pos % a.page_size;

  uint16_t lat[kLatent / 32];
  uint16_t pe0, pe1;
  if (a.input == AppendInput::normed_roped) {
#pragma unroll
    for (int k = 0; k < kLatent / 32; ++k) lat[k] = to_bf16(load_act(a, a.latent, int64_t{i} * kLatent + lane + 32 * k));
    pe0 = to_bf16(load_act(a, a.k_pe, int64_t{i} * kRope + 2 * lane));
    pe1 = to_bf16(load_act(a, a.k_pe, int64_t{i} * kRope + 2 * lane + 1));
  } else {
    // kv_norm: y = x · 1/sqrt(mean(x²) + eps) · w in fp32.
    float x[kLatent / 32];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < kLatent / 32; ++k) {
      x[k] = load_act(a, a.latent, int64_t{i} * kLatent + lane + 32 * k);
      ss += x[k] * x[k];
    }
    for (int o = 16; o > 0; o >>= 1) ss += MLA_SHFL_XOR(ss, o);
    const float inv_rms = 1.f / sqrtf(ss / static_cast<float>(kLatent) + a.eps);
#pragma unroll
    for (int k = 0; k < kLatent / 32; ++k) lat[k] = to_bf16(x[k] * inv_rms * a.kv_norm_weight[lane + 32 * k]);

    // Interleaved RoPE by pos·inv_freq[lane]. The angle and its sine/cosine are taken in fp64:
    // an fp32 angle is off by up to ~6e-4 rad near position 16K (docs/field.md, "Upstream
    // semantics"), far more than the bf16 result can hide.
    const float x0 = load_act(a, a.k_pe, int64_t{i} * kRope + 2 * lane);
    const float x1 = load_act(a, a.k_pe, int64_t{i} * kRope + 2 * lane + 1);
    double sn = 0.0, cs = 1.0;
    sincos(static_cast<double>(pos) * a.inv_freq[lane], &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    pe0 = to_bf16(x0 * c - x1 * s);
    pe1 = to_bf16(x0 * s + x1 * c);
  }
  const uint32_t pe_pair = static_cast<uint32_t>(pe0) | (static_cast<uint32_t>(pe1) << 16);

  if (a.format == AppendCacheFormat::bf16) {
    uint16_t* dst = static_cast<uint16_t*>(a.kv_cache) + slot * kD;
#pragma unroll
    for (int k = 0; k < kLatent / 32; ++k) dst[lane + 32 * k] = lat[k];
    *reinterpret_cast<uint32_t*>(dst + kLatent + 2 * lane) = pe_pair;
    return;
  }

  // FP8: block t (values 128t .. 128t+127) is lat[4t .. 4t+3] of every lane, so its amax is a
  // lane-local max of 4 followed by a warp reduction; every lane then holds all four scales.
  uint8_t* dst = static_cast<uint8_t*>(a.kv_cache) + slot * kFp8TokenBytes;
  constexpr int kPerLane = kFp8Block / 32;
  float my_scale = 0.f;  // lane t < 4 stores scale t
#pragma unroll
  for (int t = 0; t < kLatent / kFp8Block; ++t) {
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) amax = nan_max(amax, fabsf(bf16_value(lat[kPerLane * t + k])));
    const float scale = fp8_scale<D>(warp_nan_max(amax), a.scale_fmt);
    if (lane == t) my_scale = scale;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int kk = kPerLane * t + k;
      dst[lane + 32 * kk] = e4m3_encode<D>(div_rn(bf16_value(lat[kk]), scale));
    }
  }
  if (lane < kLatent / kFp8Block) *reinterpret_cast<float*>(dst + kLatent + 4 * lane) = my_scale;
  *reinterpret_cast<uint32_t*>(dst + kLatent + 4 * (kLatent / kFp8Block) + 4 * lane) = pe_pair;
}

MLA_SIM_NAMESPACE_END
}  // namespace mla::cuda::detail::append
