// The fp64 oracle's two speed settings must not move its results: the thread count not at all
// (bit for bit), the ISA of its products only within the fp64 bounds of the scalar (SSE2) path.
// Also the threads setting itself (mla/core/threads.hpp) and the ISA setting (mla/core/isa.hpp).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/isa.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/gemm.hpp"
#include "support/attn_builder.hpp"
#include "support/expect.hpp"

namespace mla {
namespace {

using testing::AttnSpec;
using testing::bitwise_equal;

// Restores the process-wide settings whatever a test does.
struct Settings {
  ~Settings() {
    set_threads(0);
    set_simd_isa(std::nullopt);
  }
};

struct Case {
  const char* name;
  AttnSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  AttnSpec dense;
  dense.seqlens = {37, 0, 130, 5};
  dense.s_q = 2;
  v.push_back({"dense_bf16", dense});
  AttnSpec seg;  // one sequence cut into 18 split-KV segments of 512 tokens (the last partial), merged
  seg.seqlens = {2 * 4096 + 700, 3};
  seg.heads = 4;
  seg.s_q = 2;
  v.push_back({"dense_bf16_two_segments", seg});
  AttnSpec fp8 = dense;
  fp8.format = CacheFormat::fp8;
  v.push_back({"dense_fp8", fp8});
  AttnSpec sparse;
  sparse.topk = 16;
  sparse.s_q = 3;
  v.push_back({"sparse_bf16", sparse});
  return v;
}

TEST(OracleThreads, BitwiseEqualForOneTwoAndThreeThreads) {
  Settings restore;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto lg = testing::make_logical(c.spec);
    const auto p = testing::lay_out(lg, {});
    set_threads(1);
    const auto one = ref::attention_fp64(p.inputs());
    for (int t : {2, 3}) {
      set_threads(t);
      const auto many = ref::attention_fp64(p.inputs());
      EXPECT_TRUE(bitwise_equal("out", one.out, many.out)) << t << " threads";
      EXPECT_TRUE(bitwise_equal("lse", one.lse, many.lse)) << t << " threads";
    }
    // And the split-KV merge is the same mathematics: within the fp64 bounds of plain loops.
    EXPECT_TRUE(testing::matches("attention_fp64 vs plain loops", one, p.shape, testing::oracle(lg)));
  }
}

// A caller that keeps its result and scratch between calls (cpu_mla_fp64's prepared state) gets
// the bits of a fresh call, whatever shape the buffers held before: larger, smaller, another
// cache format, sparse after dense.
TEST(OracleScratch, ReusedBuffersGiveTheBitsOfAFreshCall) {
  Settings restore;
  set_threads(2);
  ref::AttnResult res;
  ref::AttentionScratch scratch;
  const auto all = cases();
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t i = 0; i < all.size(); ++i) {
      const Case& c = all[pass == 0 ? i : all.size() - 1 - i];
      SCOPED_TRACE(fmt::format("{} (pass {})", c.name, pass));
      const auto p = testing::lay_out(testing::make_logical(c.spec), {});
      const auto fresh = ref::attention_fp64(p.inputs());
      ref::attention_fp64(p.inputs(), res, scratch);
      EXPECT_TRUE(bitwise_equal("out", fresh.out, res.out));
      EXPECT_TRUE(bitwise_equal("lse", fresh.lse, res.lse));
    }
}

// Every ISA this CPU runs (the scalar one always) against the SSE2 path and the plain loops.
TEST(OracleIsa, EachAvailablePathWithinFp64BoundsOfScalar) {
  Settings restore;
  int paths = 0;
  for (SimdIsa isa : {SimdIsa::sse2, SimdIsa::avx2, SimdIsa::avx512}) {
    if (!cpu_supports(isa)) {
      std::cout << "[ SKIPPED ] " << to_string(isa) << ": this CPU does not run it\n";
      continue;
    }
    ++paths;
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(c.name) + " / " + to_string(isa));
      const auto lg = testing::make_logical(c.spec);
      const auto p = testing::lay_out(lg, {});
      set_simd_isa(SimdIsa::sse2);
      const auto scalar = ref::attention_fp64(p.inputs());
      set_simd_isa(isa);
      EXPECT_EQ(ref::gemm_isa(), isa);
      const auto got = ref::attention_fp64(p.inputs());
      EXPECT_TRUE(testing::matches("attention_fp64 vs its sse2 path", got, p.shape, scalar));
      EXPECT_TRUE(testing::matches("attention_fp64 vs plain loops", got, p.shape, testing::oracle(lg)));
    }
  }
  EXPECT_GE(paths, 1);
}

// The softmax's exp on every ISA this CPU runs: within 4 ulp of the scalar exp (glibc's vector
// exp on AVX2/AVX-512), the same for the whole row and its tail, -inf to 0 and NaN kept.
TEST(ExpMinus, EveryIsaWithinFourUlpOfTheScalarExp) {
  Settings restore;
  for (SimdIsa isa : {SimdIsa::sse2, SimdIsa::avx2, SimdIsa::avx512}) {
    if (!cpu_supports(isa)) continue;
    set_simd_isa(isa);
    SCOPED_TRACE(to_string(isa));
    for (double m : {0.0, 3.5, -20.0})
      for (int64_t n : {1, 3, 4, 7, 8, 9, 19, 1000}) {
        std::vector<double> x(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = m - 740.0 * static_cast<double>(i) / static_cast<double>(n);
        if (n > 3) x[1] = -std::numeric_limits<double>::infinity(), x[2] = std::nan("");
        std::vector<double> got = x;
        ref::exp_minus(got.data(), n, m);
        for (int64_t i = 0; i < n; ++i) {
          const double want = std::exp(x[static_cast<std::size_t>(i)] - m), g = got[static_cast<std::size_t>(i)];
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(g)) << i;
            continue;
          }
          const double ulp = std::nextafter(want, std::numeric_limits<double>::infinity()) - want;
          EXPECT_LE(std::abs(g - want), 4 * ulp) << "n=" << n << " i=" << i << " x-m=" << x[static_cast<std::size_t>(i)] - m;
        }
      }
  }
}

TEST(Gemm, EveryIsaComputesTheProducts) {
  Settings restore;
  // Small exact integers: every summation order gives the same exact result. Shapes that take
  // Eigen's path and the few-row path (m <= 32, k a multiple of the vector width for A·Bᵀ, n of
  // four vectors for A·B), with remainders of rows and tokens.
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape sh : {Shape{5, 7, 9}, Shape{6, 70, 16}, Shape{33, 64, 24}, Shape{7, 64, 9}, Shape{1, 128, 576}}) {
    const int64_t m = sh.m, n = sh.n, k = sh.k;
    std::vector<double> a(m * k), b(n * k), bt(k * n), want(m * n, 0.0);
    for (int64_t i = 0; i < m * k; ++i) a[i] = static_cast<double>(i % 7) - 3;
    for (int64_t i = 0; i < n * k; ++i) b[i] = static_cast<double>(i % 5) - 2;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t d = 0; d < k; ++d) bt[d * n + j] = b[j * k + d];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < k; ++d) want[i * n + j] += a[i * k + d] * b[j * k + d];
    for (SimdIsa isa : {SimdIsa::sse2, SimdIsa::avx2, SimdIsa::avx512}) {
      if (!cpu_supports(isa)) continue;
      SCOPED_TRACE(fmt::format("{} m={} n={} k={}", to_string(isa), m, n, k));
      set_simd_isa(isa);
      std::vector<double> c(m * n, 1.0), c1(m * n, 1.0), c2(m * n, 1.0);
      ref::gemm_abt(m, n, k, a.data(), k, b.data(), k, c.data(), n, false);
      ref::gemm_abt(m, n, k, a.data(), k, b.data(), k, c1.data(), n, true);
      ref::gemm_ab(m, n, k, a.data(), k, bt.data(), n, c2.data(), n, true);
      for (int64_t i = 0; i < m * n; ++i) {
        EXPECT_EQ(c[i], want[i]) << "abt " << i;
        EXPECT_EQ(c1[i], want[i] + 1.0) << "abt+= " << i;
        EXPECT_EQ(c2[i], want[i] + 1.0) << "ab+= " << i;
      }
      std::vector<double> c3(m * n, 5.0);
      ref::gemm_ab(m, n, k, a.data(), k, bt.data(), n, c3.data(), n, false);
      for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ(c3[i], want[i]) << "ab " << i;
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(m * n);
      ref::gemm_abt(m, n, k, af.data(), k, bf.data(), k, cf.data(), n, false);
      for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ(cf[i], static_cast<float>(want[i])) << "f32 " << i;
    }
  }
}

// The per-ISA token decoders give exactly the values of the core's decoders: every e4m3 code
// (subnormals, both zeros, both NaNs, +-448) under non-power-of-two scales, and bf16 values.
TEST(Decode, EveryIsaMatchesTheCoreDecodersExactly) {
  Settings restore;
  std::vector<uint8_t> fp8(kFp8TokenBytes), bf(kQkDim * 2);
  for (std::size_t i = 0; i < kLatentDim; ++i) fp8[i] = static_cast<uint8_t>((i * 37 + i / 128) % 256);
  const float scales[4] = {0.0123f, 1.0f, 3.0f, 1e-4f / 448.0f};
  for (int t = 0; t < 4; ++t) std::memcpy(fp8.data() + kLatentDim + 4 * t, &scales[t], sizeof(float));
  for (std::size_t d = 0; d < kRopeDim; ++d) {
    const uint16_t h = bf16_from_double(std::ldexp(static_cast<double>(d) - 31.5, static_cast<int>(d % 9) - 4));
    std::memcpy(fp8.data() + kLatentDim + 16 + 2 * d, &h, 2);
  }
  for (std::size_t d = 0; d < kQkDim; ++d) {
    const uint16_t h = static_cast<uint16_t>(d * 113 + 7);  // every exponent, signs, a few NaN/inf
    std::memcpy(bf.data() + 2 * d, &h, 2);
  }
  std::vector<double> want_fp8(kQkDim), want_bf(kQkDim);
  fp8_dequantize_token(fp8, want_fp8);
  for (std::size_t d = 0; d < kQkDim; ++d) {
    uint16_t h;
    std::memcpy(&h, bf.data() + 2 * d, 2);
    want_bf[d] = bf16_to_float(h);
  }
  auto same = [](double a, double b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0; };
  for (SimdIsa isa : {SimdIsa::sse2, SimdIsa::avx2, SimdIsa::avx512}) {
    if (!cpu_supports(isa)) continue;
    set_simd_isa(isa);
    std::vector<double> got(kQkDim);
    ref::decode_fp8_token(fp8.data(), got.data());
    for (std::size_t d = 0; d < kQkDim; ++d)
      EXPECT_TRUE(same(want_fp8[d], got[d])) << to_string(isa) << " fp8 " << d << ": " << want_fp8[d] << " vs " << got[d];
    ref::decode_bf16_token(bf.data(), got.data());
    for (std::size_t d = 0; d < kQkDim; ++d)
      EXPECT_TRUE(same(want_bf[d], got[d])) << to_string(isa) << " bf16 " << d << ": " << want_bf[d] << " vs " << got[d];
  }
}

TEST(Isa, SettingAndEnvironment) {
  Settings restore;
  EXPECT_TRUE(cpu_supports(SimdIsa::sse2));
  EXPECT_TRUE(cpu_supports(cpu_best_isa()));
  EXPECT_EQ(simd_isa_from_string("avx2"), SimdIsa::avx2);
  EXPECT_THROW(simd_isa_from_string("neon"), Error);
  set_simd_isa(SimdIsa::sse2);
  EXPECT_EQ(simd_isa(), SimdIsa::sse2);
  ::setenv("MLA_ISA", "sse2", 1);
  set_simd_isa(std::nullopt);  // MLA_ISA is read again after this
  EXPECT_EQ(simd_isa(), SimdIsa::sse2);
  ::setenv("MLA_ISA", "avx9", 1);
  set_simd_isa(std::nullopt);
  EXPECT_THROW(simd_isa(), Error);
  EXPECT_THROW(simd_isa(), Error);  // not remembered: every call says so
  ::unsetenv("MLA_ISA");
  set_simd_isa(std::nullopt);
  EXPECT_EQ(simd_isa(), cpu_best_isa());
  if (!cpu_supports(SimdIsa::avx512)) {
    EXPECT_THROW(set_simd_isa(SimdIsa::avx512), Error);
  }
}

TEST(Threads, TasksRunOnceAndTheLowestFailureIsRethrown) {
  Settings restore;
  for (int workers : {1, 2, 5}) {
    std::vector<int> seen(100, 0);
    parallel_tasks(seen.size(), workers, [&](std::size_t i, int w) {
      EXPECT_LT(w, task_workers(seen.size(), workers));
      ++seen[i];
    });
    for (int s : seen) EXPECT_EQ(s, 1);
    // Tasks 30 and 60 throw: whatever the timing, the error is task 30's, and every task
    // below it ran.
    std::vector<int> ran(100, 0);
    try {
      parallel_tasks(ran.size(), workers, [&](std::size_t i, int) {
        ran[i] = 1;
        if (i == 30 || i == 60) throw std::runtime_error(std::to_string(i));
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "30");
    }
    for (int i = 0; i < 30; ++i) EXPECT_EQ(ran[static_cast<std::size_t>(i)], 1) << i;
  }
  EXPECT_EQ(task_workers(0, 4), 1);
  EXPECT_EQ(task_workers(3, 8), 3);
  set_threads(2);
  EXPECT_EQ(threads(), 2);
  EXPECT_EQ(task_workers(10, 0), 2);
  EXPECT_THROW(set_threads(5000), Error);
}

}  // namespace
}  // namespace mla
