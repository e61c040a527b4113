#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"

namespace {

namespace gen = mla::gen;
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

// Vigna's splitmix64 seeded with 1234567 returns mix64(1234567 + k*GAMMA) as its k-th output;
// these are the first three outputs of the reference C implementation.
TEST(Generator, Mix64IsVignasSplitmix64) {
  EXPECT_EQ(gen::mix64(1234567 + kGamma), 6457827717110365317ull);
  EXPECT_EQ(gen::mix64(1234567 + 2 * kGamma), 3203168211198807973ull);
  EXPECT_EQ(gen::mix64(1234567 + 3 * kGamma), 9817491932198370423ull);
}

// Computed once with /usr/bin/python3 on unbounded integers, straight from SCHEMA.md:
//   M = 2**64 - 1; G = 0x9E3779B97F4A7C15
//   mix64(z): z &= M; z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
//             z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M; return z ^ (z >> 31)
//   key(s, st) = mix64(s*G + st + 1);  bits(s, st, i) = mix64(key(s, st) + (i+1)*G)
//   value = ((2*((bits >> 11) * 2.0**-53) - 1) * 1.7320508075688772) * std + mean
//   bf16: float32 bits f of struct.pack('<f', value); (f + 0x7FFF + ((f >> 16) & 1)) >> 16
//   permutation: sorted(range(n), key=lambda i: bits(s, st, i))
TEST(Generator, KnownAnswersFromTheSchemaFormula) {
  EXPECT_EQ(gen::key(42, 7), 7574204745853770507ull);
  EXPECT_EQ(gen::bits(42, 7, 0), 17602199217853682461ull);
  EXPECT_EQ(gen::bits(42, 7, 1000), 15510230596854562744ull);
  EXPECT_EQ(gen::value(42, 7, 0, 0.0, 1.0), 1.5734542992887968);
  EXPECT_EQ(gen::value(42, 7, 5, 0.5, 0.02), 0.5019261577194697);
  std::vector<uint16_t> b(4);
  gen::fill_bf16(42, 7, 0.0, 1.0, b);
  EXPECT_EQ(b, (std::vector<uint16_t>{0x3fc9, 0xbfbe, 0x3e75, 0xbf93}));
  EXPECT_EQ(gen::permutation(3, 1, 8), (std::vector<int64_t>{7, 0, 1, 6, 5, 4, 3, 2}));
}

TEST(Generator, FillsAgreeWithThePerElementFormula) {
  std::vector<double> v(1000);
  gen::fill_f64(9, 3, -1.5, 4.0, v);
  for (std::size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(v[i], gen::value(9, 3, i, -1.5, 4.0)) << i;
    const double u = gen::uniform01(9, 3, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  // Streams and seeds are independent draws, not shifted copies.
  EXPECT_NE(gen::bits(9, 3, 0), gen::bits(9, 4, 0));
  EXPECT_NE(gen::bits(9, 3, 1), gen::bits(10, 3, 0));
}

TEST(Generator, UniformRangeIsSqrt3Std) {
  // u in [0, 1) maps to [-sqrt3, sqrt3) * std + mean; the ends are the formula's, exactly.
  std::vector<double> v(4096);
  gen::fill_f64(1, 1, 10.0, 2.0, v);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, 10.0 - 2.0 * 1.7320508075688772);
  EXPECT_LT(*hi, 10.0 + 2.0 * 1.7320508075688772);
}

TEST(Generator, PermutationIsAStableArgsort) {
  const auto p = gen::permutation(77, 5, 1000);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  for (std::size_t k = 1; k < p.size(); ++k) {
    ASSERT_LT(gen::bits(77, 5, p[k - 1]), gen::bits(77, 5, p[k]));
  }
  EXPECT_TRUE(gen::permutation(1, 1, 0).empty());
  EXPECT_THROW(gen::permutation(1, 1, -1), mla::Error);
}

}  // namespace
