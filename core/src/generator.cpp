#include "mla/core/generator.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

// splitmix64-uniform-v1, exactly as fixtures/SCHEMA.md writes it: every operation is on
// uint64 (wrapping, as the schema's "modulo 2^64") or float64 in the written order, so the
// Python reference and this file produce identical bits.

namespace mla::gen {

namespace {
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr double kSqrt3 = 1.7320508075688772;
}  // namespace

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t key(uint64_t seed, uint64_t stream) { return mix64(seed * kGamma + stream + 1); }

uint64_t bits(uint64_t seed, uint64_t stream, uint64_t i) {
  return mix64(key(seed, stream) + (i + 1) * kGamma);
}

double uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  return static_cast<double>(bits(seed, stream, i) >> 11) * 0x1p-53;
}

double value(uint64_t seed, uint64_t stream, uint64_t i, double mean, double std) {
  const double u = uniform01(seed, stream, i);
  return ((2.0 * u - 1.0) * kSqrt3) * std + mean;
}

// The fills hoist key() out of the loop; the per-element formula is the one above.
void fill_f64(uint64_t seed, uint64_t stream, double mean, double std, std::span<double> out) {
  const uint64_t k = key(seed, stream);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double u = static_cast<double>(mix64(k + (i + 1) * kGamma) >> 11) * 0x1p-53;
    out[i] = ((2.0 * u - 1.0) * kSqrt3) * std + mean;
  }
}

void fill_bf16(uint64_t seed, uint64_t stream, double mean, double std, std::span<uint16_t> out) {
  const uint64_t k = key(seed, stream);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double u = static_cast<double>(mix64(k + (i + 1) * kGamma) >> 11) * 0x1p-53;
    out[i] = bf16_from_double(((2.0 * u - 1.0) * kSqrt3) * std + mean);
  }
}

std::vector<int64_t> permutation(uint64_t seed, uint64_t stream, int64_t n) {
  if (n < 0) throw Error(fmt::format("gen::permutation: negative length {}", n));
  const uint64_t k = key(seed, stream);
  std::vector<uint64_t> b(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) b[i] = mix64(k + (static_cast<uint64_t>(i) + 1) * kGamma);
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Stable, so equal draws (astronomically rare) still give one defined order in every language.
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return b[x] < b[y]; });
  return order;
}

}  // namespace mla::gen
