// L0: the float64 prefill and merge oracles (mla/ref/prefill.hpp) against every case of the
// prefill and merge golden families, their edge cases, and planted bugs that the comparison
// must catch (so a pass means something).
//
// Bound: max |oracle - truth| <= 1e-12 · max |truth| per case and dataset (out, lse), with the
// infinities in the same places. The truth is the order-independent float64 of mla_ref.exact
// (within ~1e-15 of exact); the oracle sums in blocked GEMM order, so each score carries a
// rounding error of about sqrt(d_qk) · 2^-53 · sum|scale · q_i · k_i| (~1e-13 at the largest
// logits here, q std 100) and each output element one of about sqrt(s_k) · 2^-53 of its
// magnitude; both stay well under 1e-12 of the largest value, while any error of the semantics
// (a mask one key off, a wrong scale, a wrong log base) moves results by far more.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/golden/golden.hpp"
#include "mla/ref/prefill.hpp"

namespace mla {
namespace {

namespace fs = std::filesystem;
constexpr double kRel = 1e-12;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The worst error as a fraction of its bound (> 1: fails), or +inf when the infinities or NaNs
// are not in the same places.
double error_ratio(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return kInf;
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return kInf;
    if (std::isinf(got[i]) || std::isinf(want[i])) {
      if (got[i] != want[i]) return kInf;
      continue;
    }
    err = std::max(err, std::abs(got[i] - want[i]));
    mag = std::max(mag, std::abs(want[i]));
  }
  return err == 0 ? 0 : err / (kRel * mag);
}

class PrefillOracle : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = golden::default_goldens_dir();
    if (!fs::exists(dir / "MANIFEST.sha256")) GTEST_SKIP() << "no golden catalog at " << dir << " (./mla.sh goldens)";
    cat_ = golden::open_catalog(dir);
    for (const char* f : {"prefill.h5", "merge.h5"}) {
      if (!cat_.sha256.count(f)) GTEST_SKIP() << "the catalog at " << dir << " has no " << f << " (./mla.sh goldens)";
    }
  }
  std::vector<golden::PrefillCase> prefill_cases() const {
    std::vector<golden::PrefillCase> out;
    const auto path = cat_.file("prefill.h5");
    for (const auto& n : golden::read_file_info(path).cases) out.push_back(golden::load_prefill_case(path, n));
    return out;
  }
  std::vector<golden::MergeCase> merge_cases() const {
    std::vector<golden::MergeCase> out;
    const auto path = cat_.file("merge.h5");
    for (const auto& n : golden::read_file_info(path).cases) out.push_back(golden::load_merge_case(path, n));
    return out;
  }
  golden::Catalog cat_;
};

TEST_F(PrefillOracle, MatchesTheGoldenTruthOnEveryCase) {
  double worst_out = 0, worst_lse = 0;
  for (const auto& c : prefill_cases()) {
    SCOPED_TRACE(c.name);
    const auto r = ref::prefill_attention(c.inputs());
    const double eo = error_ratio(r.out, c.truth_out), el = error_ratio(r.lse, c.truth_lse);
    EXPECT_LE(eo, 1.0) << "out: worst error " << eo << " of the bound";
    EXPECT_LE(el, 1.0) << "lse: worst error " << el << " of the bound";
    worst_out = std::max(worst_out, eo);
    worst_lse = std::max(worst_lse, el);
  }
  RecordProperty("out_error_of_bound", fmt::format("{:.3g}", worst_out));
  RecordProperty("lse_error_of_bound", fmt::format("{:.3g}", worst_lse));
  std::fprintf(stderr, "[prefill oracle] worst error / bound: out %.3g, lse %.3g\n", worst_out, worst_lse);
}

// The comparison above can fail: the same oracle with the causal mask aligned top-left (the
// convention before FlashAttention 2.1), or with its lse read as base 2, is refused on the cases
// where the difference exists.
TEST_F(PrefillOracle, PlantedBugsAreCaught) {
  int top_left_caught = 0, chunked = 0, base2_caught = 0;
  for (const auto& c : prefill_cases()) {
    SCOPED_TRACE(c.name);
    bool has_chunk = false;
    for (int64_t i = 0; i < c.shape.batch; ++i) has_chunk |= c.shape.causal && c.s_q(i) > 0 && c.s_q(i) != c.s_k(i);
    const auto tl = ref::prefill_attention(c.inputs(), CausalAlignment::top_left);
    const bool tl_caught = error_ratio(tl.out, c.truth_out) > 1.0 || error_ratio(tl.lse, c.truth_lse) > 1.0;
    // Where s_q == s_k everywhere the two alignments are the same mask: nothing to catch.
    EXPECT_EQ(tl_caught, has_chunk);
    chunked += has_chunk;
    top_left_caught += tl_caught;
    auto r = ref::prefill_attention(c.inputs());
    for (double& l : r.lse) l *= 1.4426950408889634;  // log2(e): a base-2 lse taken for natural
    base2_caught += error_ratio(r.lse, c.truth_lse) > 1.0;
  }
  EXPECT_GE(chunked, 3) << "the family lost its chunked cases";
  EXPECT_EQ(top_left_caught, chunked);
  EXPECT_EQ(base2_caught, static_cast<int>(prefill_cases().size()));
}

TEST_F(PrefillOracle, TheBitsDoNotDependOnTheThreadCount) {
  for (const auto& c : prefill_cases()) {
    SCOPED_TRACE(c.name);
    const PrefillInputs in = c.inputs();
    const auto many = ref::prefill_attention(in);
    set_threads(1);
    const auto one = ref::prefill_attention(in);
    set_threads(0);
    EXPECT_EQ(std::memcmp(many.out.data(), one.out.data(), many.out.size() * sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(many.lse.data(), one.lse.data(), many.lse.size() * sizeof(double)), 0);
  }
}

TEST_F(PrefillOracle, MergeMatchesTheGoldenTruthAndNeverGivesNaN) {
  for (const auto& c : merge_cases()) {
    SCOPED_TRACE(c.name);
    const auto r = ref::merge_states(c.tokens, c.heads, c.head_dim, c.out_a, c.lse_a, c.out_b, c.lse_b);
    EXPECT_LE(error_ratio(r.out, c.truth_out), 1.0);
    EXPECT_LE(error_ratio(r.lse, c.truth_lse), 1.0);
    for (double x : r.out) ASSERT_FALSE(std::isnan(x));
    for (double x : r.lse) ASSERT_FALSE(std::isnan(x));
  }
}

TEST(MergeStates, EmptySidesAndFarApartStatesNeverGiveNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // One head, head_dim 2, a token per combination of (lse_a, lse_b); an empty side's out is NaN.
  const std::vector<std::pair<double, double>> rows = {
      {kInf, 1.0}, {-kInf, 1.0}, {1.0, kInf}, {1.0, -kInf}, {kInf, kInf}, {-kInf, -kInf}, {kInf, -kInf},
      {500.0, 1500.0}, {1500.0, 500.0}, {-800.0, -1800.0}};
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<double> oa, ob, la, lb;
  for (const auto& [a, b] : rows) {
    la.push_back(a);
    lb.push_back(b);
    for (int d = 0; d < 2; ++d) {
      oa.push_back(std::isinf(a) ? nan : 1.0 + d);
      ob.push_back(std::isinf(b) ? nan : -3.0 - d);
    }
  }
  const auto r = ref::merge_states(n, 1, 2, oa, la, ob, lb);
  for (int64_t t = 0; t < n; ++t) {
    SCOPED_TRACE(fmt::format("lse_a {} lse_b {}", rows[t].first, rows[t].second));
    const bool ea = std::isinf(rows[t].first), eb = std::isinf(rows[t].second);
    for (int d = 0; d < 2; ++d) {
      const double o = r.out[static_cast<std::size_t>(2 * t + d)];
      ASSERT_FALSE(std::isnan(o));
      // One side empty, or the other 1000 below (its weight e^-1000 underflows to 0): the
      // merge is the other side exactly.
      const bool a_only = eb || (!ea && rows[t].first - rows[t].second >= 1000);
      const bool b_only = ea || (!eb && rows[t].second - rows[t].first >= 1000);
      if (ea && eb) {
        EXPECT_EQ(o, 0.0);
      } else if (a_only) {
        EXPECT_EQ(o, 1.0 + d);
      } else if (b_only) {
        EXPECT_EQ(o, -3.0 - d);
      }
    }
    const double l = r.lse[static_cast<std::size_t>(t)];
    if (ea && eb) EXPECT_EQ(l, -kInf);
    else EXPECT_EQ(l, std::max(ea ? -kInf : rows[t].first, eb ? -kInf : rows[t].second));
  }
  EXPECT_THROW((void)ref::merge_states(1, 1, 2, std::vector<double>(2), std::vector<double>{nan},
                                       std::vector<double>(2), std::vector<double>{0.0}),
               Error);
}

// The golden cases are short (the truth costs 1 KiB per row and head); this one has several row
// blocks and key chunks per sequence, held to a plain two-pass softmax written out here, and to
// itself on one thread.
TEST(PrefillAttention, LongSequencesMatchAPlainLoop) {
  const int64_t h = 2, dqk = 192, dv = 128;
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{300, 700}, {5, 0}, {600, 300}, {1, 1}};
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (const auto& [sq, sk] : seqs) {
    cu_q.push_back(cu_q.back() + sq);
    cu_k.push_back(cu_k.back() + sk);
  }
  auto fill = [](std::size_t n, uint32_t salt) {
    std::vector<uint16_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = bf16_from_float(static_cast<float>(((i * 2654435761u + salt) >> 8) % 2001) / 1000.f - 1.f);
    return v;
  };
  const auto q = fill(static_cast<std::size_t>(cu_q.back() * h * dqk), 1), k = fill(static_cast<std::size_t>(cu_k.back() * h * dqk), 2),
             v = fill(static_cast<std::size_t>(cu_k.back() * h * dv), 3);
  const double scale = 0.0721;
  PrefillShape shape{static_cast<int>(seqs.size()), static_cast<int>(h), cu_q.back(), cu_k.back()};
  const PrefillInputs in{shape, scale, q, k, v, cu_q, cu_k};
  const auto r = ref::prefill_attention(in);
  const int64_t tq = cu_q.back();
  std::vector<double> want_out(r.out.size(), 0.0), want_lse(r.lse.size(), kInf);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const int64_t sq = seqs[i].first, sk = seqs[i].second;
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t j = 0; j < sq; ++j) {
        const int64_t row = cu_q[i] + j, last = std::min(sk - 1, sk - sq + j);
        if (last < 0) continue;
        std::vector<double> sc(static_cast<std::size_t>(last + 1));
        double mx = -kInf;
        for (int64_t t = 0; t <= last; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < dqk; ++d) {
            dot += static_cast<double>(bf16_to_float(q[static_cast<std::size_t>((row * h + hh) * dqk + d)])) *
                   bf16_to_float(k[static_cast<std::size_t>(((cu_k[i] + t) * h + hh) * dqk + d)]);
          }
          sc[static_cast<std::size_t>(t)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < dv; ++d) {
          double o = 0;
          for (int64_t t = 0; t <= last; ++t) {
            o += sc[static_cast<std::size_t>(t)] * bf16_to_float(v[static_cast<std::size_t>(((cu_k[i] + t) * h + hh) * dv + d)]);
          }
          want_out[static_cast<std::size_t>((row * h + hh) * dv + d)] = o / sum;
        }
        want_lse[static_cast<std::size_t>(hh * tq + row)] = mx + std::log(sum);
      }
    }
  }
  EXPECT_LE(error_ratio(r.out, want_out), 1.0);
  EXPECT_LE(error_ratio(r.lse, want_lse), 1.0);
  set_threads(1);
  const auto one = ref::prefill_attention(in);
  set_threads(0);
  EXPECT_EQ(std::memcmp(one.out.data(), r.out.data(), r.out.size() * sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(one.lse.data(), r.lse.data(), r.lse.size() * sizeof(double)), 0);
}

TEST(PrefillAttention, LyingInputsAreRefused) {
  const std::vector<uint16_t> q(2 * kMhaDqk, 0x3F80), k(3 * kMhaDqk, 0x3F80), v(3 * kMhaDv, 0x3F80);
  const std::vector<int32_t> cu_q{0, 2}, cu_k{0, 3}, bad_k{0, 2};
  PrefillInputs in{PrefillShape{1, 1, 2, 3}, 0.5, q, k, v, cu_q, cu_k};
  EXPECT_NO_THROW((void)ref::prefill_attention(in));
  in.cu_seqlens_k = bad_k;
  EXPECT_THROW((void)ref::prefill_attention(in), Error);
  in.cu_seqlens_k = cu_k;
  in.softmax_scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW((void)ref::prefill_attention(in), Error);
}

// Not a bound (the benchmark holds the oracle to its FMA ceiling): the rate at a compute-bound
// shape on this machine, for the log and the test report.
TEST(PrefillAttention, RateAtAComputeBoundShape) {
  const int64_t s = 1024, h = 4, dqk = 192, dv = 128;
  std::vector<uint16_t> q(static_cast<std::size_t>(s * h * dqk)), k(q.size()), v(static_cast<std::size_t>(s * h * dv));
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = k[i] = static_cast<uint16_t>(0x3C00 + (i * 2654435761u) % 0x300);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(0x3C00 + (i * 40503u) % 0x300);
  const std::vector<int32_t> cu{0, static_cast<int32_t>(s)};
  const PrefillInputs in{PrefillShape{1, static_cast<int>(h), s, s, kMhaDqk, kMhaDv, false}, 0.07, q, k, v, cu, cu};
  (void)ref::prefill_attention(in);  // warm: pages, thread pool
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = ref::prefill_attention(in);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = 2.0 * s * s * (dqk + dv) * h;
  for (double x : r.lse) ASSERT_TRUE(std::isfinite(x));
  RecordProperty("gflops", fmt::format("{:.2f}", flops / secs * 1e-9));
  std::fprintf(stderr, "[prefill oracle] s=%lld h=%lld non-causal: %.3f s, %.2f GFLOP/s on %d threads\n",
               static_cast<long long>(s), static_cast<long long>(h), secs, flops / secs * 1e-9, threads());
}

}  // namespace
}  // namespace mla
