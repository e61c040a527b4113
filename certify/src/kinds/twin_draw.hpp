// Private to mla_certify: what every kind's fresh twin (mla/certify/twin.hpp) draws its symmetries
// with: permutations and signs from one seed, in the order they are asked for (the seed's meaning),
// and the one-bit sign flip of a bf16 value.
#pragma once

#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"

namespace mla::certify {

class TwinDraw {
 public:
  explicit TwinDraw(uint64_t seed) : state_(seed) {}
  uint64_t next() { return gen::mix64(state_++ + 0x9E3779B97F4A7C15ull); }
  // Fisher-Yates: a uniformly drawn permutation of 0..n-1.
  std::vector<int> permutation(int n) {
    std::vector<int> p(static_cast<std::size_t>(n));
    std::iota(p.begin(), p.end(), 0);
    for (int i = n - 1; i > 0; --i) {
      std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(next() % static_cast<uint64_t>(i + 1))]);
    }
    return p;
  }
  std::vector<uint8_t> signs(int n) {
    std::vector<uint8_t> s(static_cast<std::size_t>(n));
    for (auto& x : s) x = static_cast<uint8_t>(next() & 1u);
    return s;
  }

 private:
  uint64_t state_;
};

// A sign flip is one bit in bf16: exact.
inline uint16_t bf16_signed(uint16_t x, bool flip) { return flip ? static_cast<uint16_t>(x ^ 0x8000u) : x; }

// The standard deviation of a twin's noise on q: `fraction` of the RMS of its finite bf16 values
// (0 when none is finite), so the noise keeps the case's scale (a q of std 100 stays one).
inline double bf16_noise_sd(std::span<const uint16_t> q, double fraction) {
  double sum2 = 0;
  std::size_t finite = 0;
  for (const uint16_t x : q) {
    const double v = bf16_to_float(x);
    if (std::isfinite(v)) sum2 += v * v, ++finite;
  }
  return finite ? fraction * std::sqrt(sum2 / static_cast<double>(finite)) : 0.0;
}

}  // namespace mla::certify
