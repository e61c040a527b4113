#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"

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

// The fast path (vector kernels, threads, any starting counter) against the scalar formula of
// the schema, element by element and bit for bit: seeds and streams at the edges of uint64,
// offsets whose counters wrap mod 2^64, lengths around every vector width (4, 8, 16) and
// odd ones, thread counts that cut the range at odd places, and means/stds that give
// infinities, NaN and negative zero (the bf16 NaN rule) besides ordinary values.
struct FastCase {
  uint64_t seed, stream, first;
  double mean, sd;
};

std::vector<FastCase> fast_cases() {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<FastCase> v = {
      {0, 0, 0, 0.0, 1.0},        {42, 7, 0, 0.5, 0.02},    {kMax, kMax, 0, -1.5, 4.0},
      {1, 2, kMax - 5, 0.0, 1.0},  // counters wrap past 2^64 inside the range
      {3, 4, (uint64_t{1} << 32) - 3, 1e-6, 1e-6}, {5, 6, 123456789, 0.0, 1e300},  // 1e300 * 2^-52 stays finite, float32 overflows to inf
      {7, 8, 99, 0.0, 1e-40},       // float32 subnormals
      {9, 10, 0, -0.0, 0.0},        // every value is -0.0 + 0 ... = +0 or -0 exactly as the formula says
      {11, 12, 5, nan, 1.0},        // NaN: the bf16 rule keeps it quiet with its sign
      {13, 14, 7, inf, 1.0},        {15, 16, 1, 0.0, inf},  // inf·0 = NaN where u = 0.5
      {2026, 11, 31, 100.0, 100.0},
  };
  // And a spread of ordinary draws: seeds/streams/offsets from the generator itself.
  for (uint64_t i = 0; i < 20; ++i)
    v.push_back({gen::bits(1, 1, i), gen::bits(1, 2, i) % 1000, gen::bits(1, 3, i) >> (i % 64),
                 gen::value(1, 4, i, 0.0, 3.0), std::ldexp(1.0, static_cast<int>(i) - 10)});
  return v;
}

std::vector<gen::Isa> isas() {
  std::vector<gen::Isa> v = {gen::Isa::scalar, gen::Isa::automatic};
  for (gen::Isa i : {gen::Isa::avx2, gen::Isa::avx512})
    if (gen::supported(i)) v.push_back(i);
  return v;
}

TEST(GeneratorFastPath, EveryKernelEqualsTheScalarFormulaBitForBit) {
  const std::size_t lengths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1000, 4099};
  std::size_t checked = 0;
  for (const FastCase& c : fast_cases()) {
    for (std::size_t n : lengths) {
      std::vector<double> want(n);
      std::vector<uint16_t> want16(n);
      for (std::size_t j = 0; j < n; ++j) {
        // The schema's formula for element first + j, through the public per-element API.
        want[j] = gen::value(c.seed, c.stream, c.first + j, c.mean, c.sd);
        want16[j] = mla::bf16_from_double(want[j]);
      }
      for (gen::Isa isa : isas()) {
        const gen::FillOptions o{.isa = isa, .threads = 1, .first = c.first};
        std::vector<double> got(n, -1.0);
        std::vector<uint16_t> got16(n, 0xDEAD);
        gen::fill_f64(c.seed, c.stream, c.mean, c.sd, got, o);
        gen::fill_bf16(c.seed, c.stream, c.mean, c.sd, got16, o);
        for (std::size_t j = 0; j < n; ++j) {
          ASSERT_EQ(std::bit_cast<uint64_t>(got[j]), std::bit_cast<uint64_t>(want[j]))
              << gen::to_string(isa) << " f64 seed " << c.seed << " stream " << c.stream << " first " << c.first
              << " n " << n << " j " << j << ": " << got[j] << " vs " << want[j];
          ASSERT_EQ(got16[j], want16[j]) << gen::to_string(isa) << " bf16 seed " << c.seed << " first " << c.first
                                         << " n " << n << " j " << j;
        }
        checked += 2 * n;
      }
    }
  }
  EXPECT_GT(checked, 100000u);
}

// Threads cut the range into pieces; whatever the cut, the bytes are the single-thread ones.
TEST(GeneratorFastPath, ThreadSplitsGiveTheSameBytes) {
  // Long enough that up to 7 threads each get a piece (>= 64K elements), plus odd tails.
  for (std::size_t n : {std::size_t{(1 << 16) * 7 + 13}, std::size_t{(1 << 17) + 1}, std::size_t{300000}}) {
    std::vector<uint16_t> ref16(n);
    std::vector<double> ref(n);
    const gen::FillOptions one{.isa = gen::Isa::scalar, .threads = 1, .first = 17};
    gen::fill_bf16(77, 3, 0.0, 2.0, ref16, one);
    gen::fill_f64(77, 3, 0.0, 2.0, ref, one);
    for (gen::Isa isa : isas()) {
      for (int t : {2, 3, 7}) {
        const gen::FillOptions o{.isa = isa, .threads = t, .first = 17};
        std::vector<uint16_t> got16(n, 0xDEAD);
        std::vector<double> got(n, -1.0);
        gen::fill_bf16(77, 3, 0.0, 2.0, got16, o);
        gen::fill_f64(77, 3, 0.0, 2.0, got, o);
        ASSERT_EQ(std::memcmp(got16.data(), ref16.data(), n * 2), 0) << gen::to_string(isa) << " threads " << t << " n " << n;
        ASSERT_EQ(std::memcmp(got.data(), ref.data(), n * 8), 0) << gen::to_string(isa) << " threads " << t << " n " << n;
      }
    }
  }
}

// A fill starting at counter `first` is the tail of a fill starting earlier: the loader and the
// benchmarks may generate a tensor in pieces.
TEST(GeneratorFastPath, OffsetsContinueTheSameSequence) {
  std::vector<uint16_t> whole(5000);
  gen::fill_bf16(8, 9, 0.0, 1.0, whole);
  for (uint64_t first : {1u, 15u, 16u, 17u, 999u, 4999u}) {
    std::vector<uint16_t> tail(5000 - first);
    gen::fill_bf16(8, 9, 0.0, 1.0, tail, {.first = first});
    ASSERT_TRUE(std::equal(tail.begin(), tail.end(), whole.begin() + static_cast<std::ptrdiff_t>(first))) << first;
  }
}

TEST(GeneratorFastPath, ThreadSettingAndErrors) {
  const int before = gen::threads();
  EXPECT_GE(before, 1);
  gen::set_threads(3);
  EXPECT_EQ(gen::threads(), 3);
  gen::set_threads(0);
  EXPECT_EQ(gen::threads(), before);
  EXPECT_THROW(gen::set_threads(-1), mla::Error);
  std::vector<double> v(10);
  EXPECT_THROW(gen::fill_f64(1, 1, 0, 1, v, {.threads = -2}), mla::Error);
  for (gen::Isa isa : {gen::Isa::avx2, gen::Isa::avx512}) {
    if (!gen::supported(isa)) {
      EXPECT_THROW(gen::fill_f64(1, 1, 0, 1, v, {.isa = isa}), mla::Error);
    }
  }
  EXPECT_EQ(gen::best_isa() == gen::Isa::scalar, !gen::supported(gen::Isa::avx2));
}

TEST(GeneratorFastPath, MlaThreadsFromTheEnvironment) {
  const char* old = std::getenv("MLA_THREADS");
  const std::string saved = old ? old : "";
  ::setenv("MLA_THREADS", "5", 1);
  EXPECT_EQ(gen::threads(), 5);
  for (const char* bad : {"0", "-3", "two", "4x", "100000"}) {
    ::setenv("MLA_THREADS", bad, 1);
    try {
      (void)gen::threads();
      ADD_FAILURE() << "MLA_THREADS=" << bad << " accepted";
    } catch (const mla::Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  gen::set_threads(2);  // an explicit setting wins over the environment
  EXPECT_EQ(gen::threads(), 2);
  gen::set_threads(0);
  if (old) {
    ::setenv("MLA_THREADS", saved.c_str(), 1);
  } else {
    ::unsetenv("MLA_THREADS");
  }
}

TEST(GeneratorFastPath, ParallelForCoversEveryItemOnceAndRethrows) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{1000}, std::size_t{100001}}) {
    std::vector<int> hits(n, 0);
    gen::parallel_for(n, 10, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) ++hits[i];
    }, 4);
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; })) << n;
  }
  EXPECT_THROW(gen::parallel_for(1000, 10, [](std::size_t b, std::size_t) {
    if (b > 0) throw mla::Error("piece failed");
  }, 4), mla::Error);
}

}  // namespace
