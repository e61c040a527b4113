// L0: the C++ oracles of V3.2's sparse path against the indexer golden family (the Python
// reference's Indexer.forward, step by step): the key quantizer of the cache append
// (mla/ref/indexer_append.hpp) against act_quant of the stored bf16 q and k, the indexer logits
// oracle (mla/ref/indexer_logits.hpp) against the float64 truth, and the top-k judge and an exact
// selection against the stored top-k. Then planted errors the comparisons must catch, so that a
// pass means something.
//
// Logits bound: |oracle - truth| <= 4 * 2^-53 * (|truth| + magnitude), magnitude the oracle's
// sum_h |w_h| * sum_d |q8_hd * k8_d| * k_scale. The oracle is within one ulp of the real value
// (two with a float32 scale, mla/ref/indexer_logits.hpp); the Python truth sums the heads through
// a hi/lo split product whose remainder is rounded relative to the terms' size, not the result's
// (mla_ref/exact.py), so where the weights' signs cancel the two may differ by a few ulps of the
// magnitude. Any error of the semantics (a missing relu, a scale applied twice, the wrong key)
// moves a logit by a sizeable fraction of its magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/topk.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/topk.hpp"
#include "mla/ref/indexer_append.hpp"
#include "mla/ref/indexer_logits.hpp"

namespace mla {
namespace {

namespace fs = std::filesystem;
constexpr double kUlps = 4 * 0x1p-53;
constexpr double kInf = std::numeric_limits<double>::infinity();

class IndexerOracle : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = golden::default_goldens_dir();
    if (!fs::exists(dir / "MANIFEST.sha256")) GTEST_SKIP() << "no golden catalog at " << dir << " (./mla.sh goldens)";
    cat_ = golden::open_catalog(dir);
    if (!cat_.sha256.count("indexer.h5")) GTEST_SKIP() << "the catalog at " << dir << " has no indexer.h5 (./mla.sh goldens)";
    const auto path = cat_.file("indexer.h5");
    for (const auto& n : golden::read_file_info(path).cases) cases_.push_back(golden::load_indexer_case(path, n));
  }
  golden::Catalog cat_;
  std::vector<golden::IndexerCase> cases_;
};

// The step as one ragged call of the logits contract: row (b, i) against the keys of sequence b,
// which sit at [b * T, (b + 1) * T) of the packed cache, range [b * T, b * T + n_valid).
struct Ragged {
  IndexerLogitsBuffers buf;
  int64_t T = 0;
};
Ragged ragged_call(const golden::IndexerCase& c, std::size_t k, const golden::IndexerKeys& cache) {
  const auto& s = c.steps[k];
  Ragged r;
  r.T = cache.positions;
  const int64_t rows = c.batch * s.seqlen;
  r.buf.shape.layout = IndexerLogitsLayout::ragged;
  r.buf.shape.batch = rows;
  r.buf.shape.next_n = 1;
  r.buf.shape.heads = c.heads;
  r.buf.shape.num_keys = c.batch * r.T;
  r.buf.q = s.q_codes;
  r.buf.weights = s.weights;
  r.buf.k_codes = cache.codes;
  r.buf.k_scales = cache.scales;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / s.seqlen;
    r.buf.ks.push_back(static_cast<int32_t>(b * r.T));
    r.buf.ke.push_back(static_cast<int32_t>(b * r.T + s.n_valid[static_cast<std::size_t>(row)]));
  }
  return r;
}

// Row (b, i)'s logits over its sequence's T positions, out of the oracle's [rows, b * T].
std::vector<double> per_sequence(const std::vector<double>& full, const Ragged& r, int64_t seqlen) {
  const int64_t rows = r.buf.shape.batch, cols = r.buf.shape.num_keys;
  std::vector<double> out(static_cast<std::size_t>(rows * r.T));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / seqlen;
    for (int64_t t = 0; t < r.T; ++t) out[static_cast<std::size_t>(row * r.T + t)] = full[static_cast<std::size_t>(row * cols + b * r.T + t)];
  }
  return out;
}

// f(case, step, its ragged call, the oracle's result) for every step of every case.
template <class F>
void each_step(const std::vector<golden::IndexerCase>& cases, F f) {
  for (const auto& c : cases) {
    for (std::size_t k = 0; k < c.steps.size(); ++k) {
      SCOPED_TRACE(fmt::format("{} step {}", c.name, k));
      const auto r = ragged_call(c, k, c.keys_through(k));
      f(c, c.steps[k], r, ref::indexer_logits_reference(r.buf.view()));
    }
  }
}

// The worst |got - want| / bound, +inf where the infinities differ.
double logits_error(const std::vector<double>& got, const std::vector<double>& mag, const std::vector<double>& want) {
  if (got.size() != want.size()) return kInf;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(got[i]) || std::isinf(want[i])) {
      if (got[i] != want[i]) return kInf;
      continue;
    }
    const double err = std::abs(got[i] - want[i]);
    if (err > 0) worst = std::max(worst, err / (kUlps * (std::abs(want[i]) + mag[i])));
  }
  return worst;
}

// The exact top-K set of each row of `logits` [rows, T] (descending, ties by ascending position),
// -1 padded: what the reference's topk() selects.
std::vector<int32_t> exact_topk(const std::vector<double>& logits, int64_t rows, int64_t T, int64_t K) {
  std::vector<int32_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> pos;
    for (int64_t t = 0; t < T; ++t) {
      if (std::isfinite(logits[static_cast<std::size_t>(r * T + t)])) pos.push_back(static_cast<int32_t>(t));
    }
    std::stable_sort(pos.begin(), pos.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<std::size_t>(r * T + a)] > logits[static_cast<std::size_t>(r * T + b)];
    });
    for (int64_t j = 0; j < K; ++j) out.push_back(j < static_cast<int64_t>(pos.size()) ? pos[static_cast<std::size_t>(j)] : -1);
  }
  return out;
}

// The stored selection judged by the one top-k judge against float32 logits [rows, T].
TopkJudgement judge_stored(const std::vector<int32_t>& idx, const std::vector<float>& logits, int64_t rows, int64_t T,
                           int64_t K) {
  TopkBuffers in;
  in.shape = {rows, T, static_cast<int>(K)};
  in.logits = logits;
  in.starts.assign(static_cast<std::size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t e = 0;
    for (int64_t t = 0; t < T; ++t) e += std::isfinite(logits[static_cast<std::size_t>(r * T + t)]) ? 1 : 0;
    in.ends.push_back(e);  // the causal horizon: the finite prefix
  }
  TopkOutputs got;
  got.indices.assign(idx.begin(), idx.end());
  return judge_topk(in.view(), got, LogitsPrecision::f32, /*sorted=*/true);
}

TEST_F(IndexerOracle, TheFamilyHoldsBothLayoutsBothFormatsAndV32sHeadCount) {
  int interleaved = 0, half = 0, ue8m0 = 0, fp32 = 0, h64 = 0;
  for (const auto& c : cases_) {
    interleaved += c.rope_layout == "interleaved";
    half += c.rope_layout == "half";
    ue8m0 += c.scale_fmt == ScaleFmt::ue8m0;
    fp32 += c.scale_fmt == ScaleFmt::fp32;
    h64 += c.heads == 64;
  }
  EXPECT_GE(interleaved, 2);
  EXPECT_GE(half, 2);
  EXPECT_GE(ue8m0, 2);
  EXPECT_GE(fp32, 2);
  EXPECT_GE(h64, 1);
}

// The cache append's key quantizer (DeepSeek's recipe: amax times float32(1/448)) gives the
// stored codes and scales of every key and, block by block, of every query head.
TEST_F(IndexerOracle, TheKeyQuantizerIsActQuant) {
  int64_t blocks = 0, expected = 0;
  for (const auto& c : cases_) {
    for (const auto& s : c.steps) {
      expected += c.batch * s.seqlen * (c.heads + 1);  // every query head and every key
      SCOPED_TRACE(fmt::format("{} step at {}", c.name, s.start_pos));
      const auto check = [&](const std::vector<uint16_t>& x, const std::vector<uint8_t>& codes,
                             const std::vector<float>& scales, const char* what) {
        for (std::size_t blk = 0; blk < scales.size(); ++blk) {
          const auto q = ref::indexer_quantize_key(std::span(x).subspan(blk * 128, 128), c.scale_fmt,
                                                   IndexerScaleOp::times_reciprocal);
          ASSERT_EQ(q.scale, scales[blk]) << what << " block " << blk;
          ASSERT_TRUE(std::equal(q.codes.begin(), q.codes.end(), codes.begin() + static_cast<std::ptrdiff_t>(blk * 128)))
              << what << " block " << blk;
          ++blocks;
        }
      };
      check(s.k, s.k_codes, s.k_scale, "k");
      check(s.q, s.q_codes, s.q_scale, "q");
    }
  }
  EXPECT_EQ(blocks, expected);
  EXPECT_GT(expected, 0);
}

TEST_F(IndexerOracle, LogitsMatchTheGoldenTruthOnEveryStep) {
  double worst = 0;
  each_step(cases_, [&](const golden::IndexerCase&, const golden::IndexerStep& s, const Ragged& r,
                        const ref::IndexerLogitsTruth& truth) {
    const double e = logits_error(per_sequence(truth.logits, r, s.seqlen), per_sequence(truth.magnitude, r, s.seqlen),
                                  s.logits_truth);
    EXPECT_LE(e, 1.0) << "worst error " << e << " of the bound";
    worst = std::max(worst, e);
  });
  RecordProperty("logits_error_of_bound", fmt::format("{:.3g}", worst));
  std::fprintf(stderr, "[indexer oracle] worst logits error / bound: %.3g\n", worst);
}

// Where the K-th and (K+1)-th logits are not tied, the oracle's exact selection is the stored
// one; and the one judge passes both stored selections (truth and deployed) against the float32
// logits they came from.
TEST_F(IndexerOracle, TheSelectionsAreTheStoredOnes) {
  int64_t rows_compared = 0;
  each_step(cases_, [&](const golden::IndexerCase& c, const golden::IndexerStep& s, const Ragged& r,
                        const ref::IndexerLogitsTruth& truth) {
    const auto logits = per_sequence(truth.logits, r, s.seqlen);
    const int64_t rows = c.batch * s.seqlen, T = s.end_pos(), K = c.topk_width(s);
    const auto mine = exact_topk(logits, rows, T, K);
    for (int64_t row = 0; row < rows; ++row) {
      if (s.tie_truth[static_cast<std::size_t>(row)]) continue;
      std::vector<int32_t> a(mine.begin() + row * K, mine.begin() + (row + 1) * K);
      std::vector<int32_t> b(s.topk_truth.begin() + row * K, s.topk_truth.begin() + (row + 1) * K);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b) << "row " << row;
      ++rows_compared;
    }
    const std::vector<float> truth32(s.logits_truth.begin(), s.logits_truth.end());
    const auto jt = judge_stored(s.topk_truth, truth32, rows, T, K);
    EXPECT_TRUE(jt.pass()) << fmt::format("{}", fmt::join(jt.reasons, "; "));
    const auto jd = judge_stored(s.topk_deployed, s.logits_deployed, rows, T, K);
    EXPECT_TRUE(jd.pass()) << fmt::format("{}", fmt::join(jd.reasons, "; "));
  });
  EXPECT_GT(rows_compared, 50);
}

// The comparisons can fail. Each planted error is caught on every case where it changes
// anything: the quantizer's other float32 operation (vLLM's divide) under float32 scales, the
// logits without the relu or with each key's scale taken from the next position (where the
// scales differ), and the other RoPE layout's selection taken for this one.
TEST_F(IndexerOracle, PlantedErrorsAreCaught) {
  int divide_caught = 0, fp32_cases = 0, relu_caught = 0, shifted_caught = 0, scales_differ = 0, layout_caught = 0,
      pairs = 0;
  for (const auto& c : cases_) {
    SCOPED_TRACE(c.name);
    if (c.scale_fmt == ScaleFmt::fp32) {
      ++fp32_cases;
      bool differs = false;
      for (const auto& s : c.steps) {
        for (std::size_t blk = 0; blk < s.k_scale.size() && !differs; ++blk) {
          const auto q = ref::indexer_quantize_key(std::span(s.k).subspan(blk * 128, 128), c.scale_fmt, IndexerScaleOp::divide);
          differs = q.scale != s.k_scale[blk] ||
                    !std::equal(q.codes.begin(), q.codes.end(), s.k_codes.begin() + static_cast<std::ptrdiff_t>(blk * 128));
        }
      }
      divide_caught += differs;
    }
    const std::size_t last = c.steps.size() - 1;
    const auto& s = c.steps[0];
    auto cache = c.keys_through(0);
    auto r = ragged_call(c, 0, cache);
    // no relu: the negative dots count
    {
      const auto v = r.buf.view();
      std::vector<double> got(static_cast<std::size_t>(r.buf.shape.batch * r.buf.shape.num_keys), -kInf), mag = got;
      for (int64_t row = 0; row < r.buf.shape.batch; ++row) {
        for (int64_t p = r.buf.ks[static_cast<std::size_t>(row)]; p < r.buf.ke[static_cast<std::size_t>(row)]; ++p) {
          const auto sum = ref::indexer_logit_sum(v, row, r.buf.k_codes.data() + p * 128, /*relu=*/false);
          got[static_cast<std::size_t>(row * r.buf.shape.num_keys + p)] = sum.sum * r.buf.k_scales[static_cast<std::size_t>(p)];
          mag[static_cast<std::size_t>(row * r.buf.shape.num_keys + p)] = sum.magnitude * r.buf.k_scales[static_cast<std::size_t>(p)];
        }
      }
      relu_caught += logits_error(per_sequence(got, r, s.seqlen), per_sequence(mag, r, s.seqlen), s.logits_truth) > 1.0;
    }
    // each key's scale read from the next position (a scale area read one slot off)
    {
      auto shifted = r;
      std::rotate(shifted.buf.k_scales.begin(), shifted.buf.k_scales.begin() + 1, shifted.buf.k_scales.end());
      // Under ue8m0 neighbouring keys may share one power of two: then the slip changes nothing.
      scales_differ += shifted.buf.k_scales != r.buf.k_scales;
      const auto t = ref::indexer_logits_reference(shifted.buf.view());
      shifted_caught += logits_error(per_sequence(t.logits, r, s.seqlen), per_sequence(t.magnitude, r, s.seqlen),
                                     s.logits_truth) > 1.0;
    }
    // the other layout's selection (same inputs, same format)
    for (const auto& o : cases_) {
      if (o.rope_layout == c.rope_layout || o.seed != c.seed || o.scale_fmt != c.scale_fmt || o.heads != c.heads ||
          o.batch != c.batch || o.steps.size() != c.steps.size()) {
        continue;
      }
      ++pairs;
      bool differs = false;
      for (std::size_t k = 0; k <= last; ++k) differs |= o.steps[k].topk_truth != c.steps[k].topk_truth;
      layout_caught += differs;
    }
  }
  EXPECT_GE(fp32_cases, 2);
  EXPECT_EQ(divide_caught, fp32_cases) << "vLLM's divide gives act_quant's codes on some float32-scale case";
  EXPECT_EQ(relu_caught, static_cast<int>(cases_.size()));
  EXPECT_GE(scales_differ, static_cast<int>(cases_.size()) - 1);
  EXPECT_EQ(shifted_caught, scales_differ);
  EXPECT_GE(pairs, 4);
  EXPECT_EQ(layout_caught, pairs);
}

}  // namespace
}  // namespace mla
