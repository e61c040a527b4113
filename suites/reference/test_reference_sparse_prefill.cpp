// The sparse prefill's oracles (mla/ref/sparse_prefill.hpp) against the contract's formulas
// written out here as plain float64 loops (mla/core/sparse_prefill.hpp): every kind of entry that
// is no key, topk_length, the sink, a row with no key, both widths; the deployed-precision
// reference near the truth; and every malformed input refused naming what is wrong.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <limits>
#include <vector>

#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/ref/sparse_prefill.hpp"
#include "support/refused.hpp"

namespace {

using mla::SparsePrefillBuffers;

// s_q 6 rows over s_kv 40 keys, 3 heads, topk 8: row 0 plain, row 1 every invalid kind (-1,
// INT_MIN, s_kv, INT_MAX) among valid ones, row 2 no key at all, row 3 cut by topk_length, row 4
// keys near the end, row 5 a single key.
SparsePrefillBuffers make_case(int d_qk, bool sink, bool topk_length) {
  SparsePrefillBuffers b;
  auto& s = b.shape;
  s.s_q = 6, s.s_kv = 40, s.heads = 3, s.d_qk = d_qk, s.topk = 8, s.sink = sink, s.topk_length = topk_length;
  b.sm_scale = 0.0417;
  b.q.resize(static_cast<std::size_t>(s.s_q * s.heads * d_qk));
  b.kv.resize(static_cast<std::size_t>(s.s_kv * d_qk));
  mla::gen::fill_bf16(31, 1, 0.0, 1.0, b.q);
  mla::gen::fill_bf16(31, 2, 0.0, 1.0, b.kv);
  b.indices = {0,  5,  9,  13, 17, 21, 25, 29,                   //
               3,  -1, INT_MIN, 7, 40, INT_MAX, 11, -5,          //
               -1, -1, 40, 41, INT_MIN, INT_MAX, -2, 1000,       //
               2,  4,  6,  8,  10, 12, 14, 16,                   //
               39, 38, 37, 36, -1, -1, -1, -1,                   //
               20, -1, -1, -1, -1, -1, -1, -1};
  if (sink) b.attn_sink = {0.5f, -3.0f, 2.0f};
  if (topk_length) b.topk_length = {8, 8, 8, 3, 6, 1};
  return b;
}

struct Brute {
  std::vector<double> out, max_logits, lse;
};

// The contract's formulas, row by row, in float64.
Brute brute(const mla::SparsePrefillInputs& in) {
  const auto& s = in.shape;
  Brute r;
  r.out.assign(static_cast<std::size_t>(s.s_q * s.heads * 512), 0.0);
  r.max_logits.assign(static_cast<std::size_t>(s.s_q * s.heads), -std::numeric_limits<double>::infinity());
  r.lse.assign(r.max_logits.size(), std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < s.s_q; ++i) {
    for (int h = 0; h < s.heads; ++h) {
      std::vector<double> sc;
      std::vector<int64_t> keys;
      for (int64_t j = 0; j < s.topk; ++j) {
        if (!mla::sparse_prefill_key(in, i, j)) continue;
        const int64_t idx = in.indices[static_cast<std::size_t>(i * s.topk + j)];
        double dot = 0;
        for (int d = 0; d < s.d_qk; ++d) {
          dot += static_cast<double>(mla::bf16_to_float(in.q[static_cast<std::size_t>((i * s.heads + h) * s.d_qk + d)])) *
                 static_cast<double>(mla::bf16_to_float(in.kv[static_cast<std::size_t>(idx * s.d_qk + d)]));
        }
        sc.push_back(in.sm_scale * dot);
        keys.push_back(idx);
      }
      const auto at = static_cast<std::size_t>(i * s.heads + h);
      if (sc.empty()) continue;
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (double x : sc) m = std::max(m, x);
      for (double x : sc) sum += std::exp(x - m);
      r.max_logits[at] = m;
      r.lse[at] = m + std::log(sum);
      double denom = sum;
      if (s.sink) denom += std::exp(static_cast<double>(in.attn_sink[static_cast<std::size_t>(h)]) - m);
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const double p = std::exp(sc[k] - m) / denom;
        for (int d = 0; d < 512; ++d) {
          r.out[at * 512 + static_cast<std::size_t>(d)] += p * mla::bf16_to_float(in.kv[static_cast<std::size_t>(keys[k] * s.d_qk + d)]);
        }
      }
    }
  }
  return r;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b, double* scale = nullptr) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      EXPECT_EQ(a[i], b[i]) << "at " << i;
      continue;
    }
    d = std::max(d, std::fabs(a[i] - b[i]));
    m = std::max(m, std::fabs(b[i]));
  }
  if (scale) *scale = m;
  return d;
}

TEST(SparsePrefillOracle, EqualsTheContractsFormulasOnEveryKindOfEntry) {
  for (const int d_qk : {576, 512}) {
    for (const bool sink : {false, true}) {
      for (const bool len : {false, true}) {
        SCOPED_TRACE(testing::Message() << "d_qk " << d_qk << " sink " << sink << " topk_length " << len);
        const auto b = make_case(d_qk, sink, len);
        const auto in = b.view();
        const auto truth = mla::ref::sparse_prefill_fp64(in);
        const auto want = brute(in);
        double scale = 0;
        EXPECT_LE(max_diff(truth.out, want.out, &scale), 1e-12 * std::max(scale, 1.0));
        EXPECT_LE(max_diff(truth.lse, want.lse), 1e-12);
        EXPECT_LE(max_diff(truth.max_logits, want.max_logits), 1e-12);
        // Row 2 has no key: out 0, max_logits -inf, lse +inf, whatever the sink.
        for (int h = 0; h < 3; ++h) {
          EXPECT_EQ(truth.lse[static_cast<std::size_t>(2 * 3 + h)], std::numeric_limits<double>::infinity());
          EXPECT_EQ(truth.max_logits[static_cast<std::size_t>(2 * 3 + h)], -std::numeric_limits<double>::infinity());
          for (int d = 0; d < 512; ++d) EXPECT_EQ(truth.out[static_cast<std::size_t>((2 * 3 + h) * 512 + d)], 0.0);
        }
      }
    }
  }
}

TEST(SparsePrefillOracle, TheDeployedPipelineIsNearTheTruthAndNotEqualToIt) {
  const auto b = make_case(576, true, true);
  const auto in = b.view();
  const auto truth = mla::ref::sparse_prefill_fp64(in);
  const auto bf16 = mla::ref::sparse_prefill_same_dtype(in);
  double scale = 0;
  const double d = max_diff(bf16.out, truth.out, &scale);
  EXPECT_GT(d, 0.0) << "bf16 rounding shows";
  EXPECT_LT(d, 2.0 / 128 * scale) << "a few bf16 ulps of the largest output";
  EXPECT_LT(max_diff(bf16.lse, truth.lse), 1e-4);
  EXPECT_LT(max_diff(bf16.max_logits, truth.max_logits), 1e-4);
  for (const double x : bf16.out) EXPECT_EQ(x, static_cast<double>(mla::bf16_to_float(mla::bf16_from_double(x))));
}

TEST(SparsePrefillOracle, AnEmptyCallAndAKeylessCacheAnswerWithoutKeys) {
  auto b = make_case(576, false, false);
  b.shape.s_q = 0;
  b.q.clear();
  b.indices.clear();
  const auto none = mla::ref::sparse_prefill_fp64(b.view());
  EXPECT_TRUE(none.out.empty() && none.lse.empty() && none.max_logits.empty());
  auto c = make_case(576, true, false);
  c.shape.s_kv = 0;
  c.kv.clear();
  const auto keyless = mla::ref::sparse_prefill_fp64(c.view());
  for (const double l : keyless.lse) EXPECT_EQ(l, std::numeric_limits<double>::infinity());
  for (const double x : keyless.out) EXPECT_EQ(x, 0.0);
}

TEST(SparsePrefillOracle, MalformedInputsAreRefusedNamingWhatIsWrong) {
  using mla::testing::refused_naming;
  const auto refused = [](SparsePrefillBuffers b, const char* words) {
    return refused_naming([&] { (void)mla::ref::sparse_prefill_fp64(b.view()); }, words);
  };
  auto dup = make_case(576, false, false);
  dup.indices[1] = 0;
  EXPECT_TRUE(refused(dup, "indices[0]: position 0 is listed twice"));
  auto len = make_case(576, false, true);
  len.topk_length[2] = 9;
  EXPECT_TRUE(refused(len, "topk_length[2] = 9 outside [0, topk = 8]"));
  auto sink = make_case(576, true, false);
  sink.attn_sink[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(refused(sink, "attn_sink[1] is NaN"));
  auto missing = make_case(576, true, false);
  missing.attn_sink.clear();
  EXPECT_TRUE(refused(missing, "attn_sink holds 0 values, the shape needs 3"));
  auto width = make_case(576, false, false);
  width.shape.d_qk = 192;
  EXPECT_TRUE(refused(width, "d_qk 192"));
  auto scale = make_case(576, false, false);
  scale.sm_scale = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(refused(scale, "sm_scale inf"));
  auto nan = make_case(576, false, false);
  nan.kv[7] = 0x7FC0;
  EXPECT_TRUE(refused(nan, "kv[7] is not finite"));
}

}  // namespace
