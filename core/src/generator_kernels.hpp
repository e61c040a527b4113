// Internal to the generator (generator.cpp, generator_simd.cpp): the per-element formula of
// splitmix64-uniform-v1 and the vector kernels that reproduce it.
//
// Bit-identity rules every kernel keeps (fixtures/SCHEMA.md: "the operations are float64 and
// happen in the order written"):
//  * the counter z = key + (i + 1)·GAMMA is computed mod 2^64; a kernel steps it by lanes·GAMMA,
//    which is the same residue;
//  * (bits >> 11) < 2^53 converts to double exactly, so any exact conversion is the cast;
//  * then exactly four rounded operations, in order: 2u - 1 (2u is exact), · sqrt3, · std,
//    + mean. No fused multiply-add: both generator TUs are compiled with -ffp-contract=off
//    (core/CMakeLists.txt), or a compiler allowed to fuse `x * std + mean` would round once
//    instead of twice and the bits would differ from the Python reference's;
//  * double -> float32 in the current rounding mode (nearest even), then float32 -> bf16 by the
//    integer rule of bf16_from_float (NaN kept quiet with its sign and top payload bits).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace mla::gen::detail {

inline constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
inline constexpr uint64_t kMul1 = 0xBF58476D1CE4E5B9ull;
inline constexpr uint64_t kMul2 = 0x94D049BB133111EBull;
inline constexpr double kSqrt3 = 1.7320508075688772;
inline constexpr double kTwoPowMinus53 = 0x1p-53;

inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * kMul1;
  z = (z ^ (z >> 27)) * kMul2;
  return z ^ (z >> 31);
}

// value of counter i for the hoisted key k.
inline double value_at(uint64_t k, uint64_t i, double mean, double sd) {
  const double u = static_cast<double>(mix(k + (i + 1) * kGamma) >> 11) * kTwoPowMinus53;
  return ((2.0 * u - 1.0) * kSqrt3) * sd + mean;
}

// bf16_from_double (core/src/numeric.cpp), inlined so the scalar tails of the vector kernels
// run the same integer rule as their vector bodies.
inline uint16_t bf16_of(double v) {
  const float f = static_cast<float>(v);
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// out[j] = element first + j, j < n (k = key(seed, stream)).
void fill_f64_scalar(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n);
void fill_bf16_scalar(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n);
void fill_f64_avx2(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n);
void fill_bf16_avx2(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n);
void fill_f64_avx512(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n);
void fill_bf16_avx512(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n);

}  // namespace mla::gen::detail
