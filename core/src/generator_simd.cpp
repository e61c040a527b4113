// The vector kernels of splitmix64-uniform-v1 (generator_kernels.hpp states the bit-identity
// rules). The library is built for the baseline x86-64 ISA, so each kernel carries its own
// target attribute and generator.cpp calls it only after the CPU said it has the instructions.
// Compiled with -ffp-contract=off (core/CMakeLists.txt): AVX-512F brings FMA instructions, and
// a contracted `v * sd + mean` would differ from the schema's two roundings.
#include "generator_kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MLA_GEN_X86 1
// GCC 12's AVX-512 intrinsics pass an `_mm512_undefined_*()` pass-through operand that
// -Wmaybe-uninitialized reports at every call site; the operand is never read (no mask).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace mla::gen::detail {

#if defined(MLA_GEN_X86)

// ---- AVX2: four 64-bit lanes -----------------------------------------------------------------
// AVX2 has no 64x64-bit multiply: a·c mod 2^64 = lo(a)·lo(c) + ((hi(a)·lo(c) + lo(a)·hi(c)) << 32),
// each product a 32x32->64 vpmuludq.
namespace {

#define MLA_AVX2 __attribute__((target("avx2")))

MLA_AVX2 inline __m256i mul64_avx2(__m256i a, __m256i c_lo, __m256i c_hi) {
  const __m256i lo = _mm256_mul_epu32(a, c_lo);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), c_lo), _mm256_mul_epu32(a, c_hi));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

struct Avx2Consts {
  __m256i m1_lo, m1_hi, m2_lo, m2_hi, low32, exp52;
  __m256d two52, two32, scale, two, one, sqrt3, sd, mean;
};

MLA_AVX2 inline Avx2Consts avx2_consts(double mean, double sd) {
  Avx2Consts c;
  c.m1_lo = _mm256_set1_epi64x(static_cast<long long>(kMul1 & 0xFFFFFFFFu));
  c.m1_hi = _mm256_set1_epi64x(static_cast<long long>(kMul1 >> 32));
  c.m2_lo = _mm256_set1_epi64x(static_cast<long long>(kMul2 & 0xFFFFFFFFu));
  c.m2_hi = _mm256_set1_epi64x(static_cast<long long>(kMul2 >> 32));
  c.low32 = _mm256_set1_epi64x(0xFFFFFFFFll);
  c.exp52 = _mm256_set1_epi64x(0x4330000000000000ll);  // the double 2^52
  c.two52 = _mm256_set1_pd(0x1p52);
  c.two32 = _mm256_set1_pd(0x1p32);
  c.scale = _mm256_set1_pd(kTwoPowMinus53);
  c.two = _mm256_set1_pd(2.0);
  c.one = _mm256_set1_pd(1.0);
  c.sqrt3 = _mm256_set1_pd(kSqrt3);
  c.sd = _mm256_set1_pd(sd);
  c.mean = _mm256_set1_pd(mean);
  return c;
}

// Four values from the counters in z.
MLA_AVX2 inline __m256d values_avx2(__m256i z, const Avx2Consts& c) {
  z = mul64_avx2(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c.m1_lo, c.m1_hi);
  z = mul64_avx2(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c.m2_lo, c.m2_hi);
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
  const __m256i x = _mm256_srli_epi64(z, 11);  // < 2^53
  // Exact: each 32-bit half becomes a double by the 2^52 exponent trick, and hi·2^32 + lo is an
  // integer below 2^53, so neither the product nor the sum rounds.
  const __m256d hi = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(x, 32), c.exp52)), c.two52);
  const __m256d lo = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(x, c.low32), c.exp52)), c.two52);
  const __m256d u = _mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(hi, c.two32), lo), c.scale);
  const __m256d t = _mm256_sub_pd(_mm256_mul_pd(c.two, u), c.one);
  return _mm256_add_pd(_mm256_mul_pd(_mm256_mul_pd(t, c.sqrt3), c.sd), c.mean);
}

// Counters of lanes 0..3 for element `first`.
MLA_AVX2 inline __m256i counters_avx2(uint64_t k, uint64_t first) {
  const uint64_t z0 = k + (first + 1) * kGamma;
  return _mm256_set_epi64x(static_cast<long long>(z0 + 3 * kGamma), static_cast<long long>(z0 + 2 * kGamma),
                           static_cast<long long>(z0 + kGamma), static_cast<long long>(z0));
}

// Eight floats -> eight bf16 (as 32-bit lanes), bf16_from_float's rule.
MLA_AVX2 inline __m256i bf16_avx2(__m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), _mm256_and_si256(_mm256_srli_epi32(u, 16), one)), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

}  // namespace

MLA_AVX2 void fill_f64_avx2(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n) {
  const Avx2Consts c = avx2_consts(mean, sd);
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(4 * kGamma));
  __m256i z = counters_avx2(k, first);
  std::size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    _mm256_storeu_pd(out + j, values_avx2(z, c));
    z = _mm256_add_epi64(z, step);
  }
  for (; j < n; ++j) out[j] = value_at(k, first + j, mean, sd);
}

MLA_AVX2 void fill_bf16_avx2(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n) {
  const Avx2Consts c = avx2_consts(mean, sd);
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(4 * kGamma));
  __m256i z = counters_avx2(k, first);
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m128 f[4];
    for (auto& q : f) {
      q = _mm256_cvtpd_ps(values_avx2(z, c));  // nearest even, as static_cast<float>
      z = _mm256_add_epi64(z, step);
    }
    const __m256i a = bf16_avx2(_mm256_set_m128(f[1], f[0])), b = bf16_avx2(_mm256_set_m128(f[3], f[2]));
    // packus works per 128-bit half: [a0-3 b0-3 | a4-7 b4-7]; the permute restores a0-7 b0-7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), packed);
  }
  for (; j < n; ++j) out[j] = bf16_of(value_at(k, first + j, mean, sd));
}

// ---- AVX-512: eight 64-bit lanes, native 64-bit multiply and u64 -> double ------------------
namespace {

#define MLA_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

struct Avx512Consts {
  __m512i m1, m2;
  __m512d scale, two, one, sqrt3, sd, mean;
};

MLA_AVX512 inline Avx512Consts avx512_consts(double mean, double sd) {
  Avx512Consts c;
  c.m1 = _mm512_set1_epi64(static_cast<long long>(kMul1));
  c.m2 = _mm512_set1_epi64(static_cast<long long>(kMul2));
  c.scale = _mm512_set1_pd(kTwoPowMinus53);
  c.two = _mm512_set1_pd(2.0);
  c.one = _mm512_set1_pd(1.0);
  c.sqrt3 = _mm512_set1_pd(kSqrt3);
  c.sd = _mm512_set1_pd(sd);
  c.mean = _mm512_set1_pd(mean);
  return c;
}

MLA_AVX512 inline __m512d values_avx512(__m512i z, const Avx512Consts& c) {
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), c.m1);
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), c.m2);
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
  // < 2^53, so the conversion is exact whatever the rounding mode.
  const __m512d u = _mm512_mul_pd(_mm512_cvtepu64_pd(_mm512_srli_epi64(z, 11)), c.scale);
  const __m512d t = _mm512_sub_pd(_mm512_mul_pd(c.two, u), c.one);
  return _mm512_add_pd(_mm512_mul_pd(_mm512_mul_pd(t, c.sqrt3), c.sd), c.mean);
}

MLA_AVX512 inline __m512i counters_avx512(uint64_t k, uint64_t first) {
  const uint64_t z0 = k + (first + 1) * kGamma;
  const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  return _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(z0)),
                          _mm512_mullo_epi64(lane, _mm512_set1_epi64(static_cast<long long>(kGamma))));
}

MLA_AVX512 inline __m512i bf16_avx512(__m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                       _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
      16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), rounded, quiet);
}

}  // namespace

MLA_AVX512 void fill_f64_avx512(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n) {
  const Avx512Consts c = avx512_consts(mean, sd);
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(8 * kGamma));
  __m512i z = counters_avx512(k, first);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm512_storeu_pd(out + j, values_avx512(z, c));
    z = _mm512_add_epi64(z, step);
  }
  for (; j < n; ++j) out[j] = value_at(k, first + j, mean, sd);
}

MLA_AVX512 void fill_bf16_avx512(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n) {
  const Avx512Consts c = avx512_consts(mean, sd);
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(8 * kGamma));
  __m512i z = counters_avx512(k, first);
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 lo = _mm512_cvtpd_ps(values_avx512(z, c));
    z = _mm512_add_epi64(z, step);
    const __m256 hi = _mm512_cvtpd_ps(values_avx512(z, c));
    z = _mm512_add_epi64(z, step);
    const __m512 f = _mm512_insertf32x8(_mm512_zextps256_ps512(lo), hi, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm512_cvtepi32_epi16(bf16_avx512(f)));
  }
  for (; j < n; ++j) out[j] = bf16_of(value_at(k, first + j, mean, sd));
}

#else  // not x86-64: only the scalar kernels exist; generator.cpp never calls these

void fill_f64_avx2(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n) {
  fill_f64_scalar(k, first, mean, sd, out, n);
}
void fill_bf16_avx2(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n) {
  fill_bf16_scalar(k, first, mean, sd, out, n);
}
void fill_f64_avx512(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n) {
  fill_f64_scalar(k, first, mean, sd, out, n);
}
void fill_bf16_avx512(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n) {
  fill_bf16_scalar(k, first, mean, sd, out, n);
}

#endif

}  // namespace mla::gen::detail
