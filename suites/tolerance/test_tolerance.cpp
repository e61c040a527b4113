// Tests of the tolerance engine: each rule is shown to fail when it should, and the table's
// bounds are checked against what a correct implementation of each precision produces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/core/attention.hpp"

namespace {

using mla::tol::Comparison;
using mla::tol::judge;
using mla::tol::lookup;
using mla::tol::Tolerance;
using mla::tol::Verdict;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

int64_t flat_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// Attention-output-like data: uniform with unit standard deviation, reproducible.
std::vector<double> random_values(int64_t n, uint64_t stream) {
  std::vector<double> v(static_cast<std::size_t>(n));
  mla::gen::fill_f64(/*seed=*/20261130, stream, 0.0, 1.0, v);
  return v;
}

// The largest e' <= e for which t + e' is exact, so that |(t + e') - t| == e' with no rounding
// and a test of an inclusive bound is not decided by the last bit.
double exact_step(double t, double e) {
  const double s = std::fabs(t + e);
  const double ulp = std::nextafter(s, kInf) - s;
  return std::floor(e / ulp) * ulp;
}

bool has_reason_containing(const Comparison& c, const std::string& needle) {
  return std::any_of(c.reasons.begin(), c.reasons.end(),
                     [&](const std::string& r) { return r.find(needle) != std::string::npos; });
}

std::string all_reasons(const Comparison& c) {
  std::string s;
  for (const auto& r : c.reasons) s += r + "\n";
  return s;
}

TEST(ToleranceTable, EveryEntryHasAReasonAndPositiveBounds) {
  std::set<std::string> names;
  ASSERT_FALSE(mla::tol::table().empty());
  for (const auto& t : mla::tol::table()) {
    SCOPED_TRACE(t.name);
    EXPECT_TRUE(names.insert(t.name).second) << "duplicate tolerance name";
    EXPECT_FALSE(t.why.empty());
    // An exact entry (a result with one right answer, bitwise: the indexer cache's codes and
    // scales) is zero in all three bounds at once and says so; every other bound is positive.
    if (t.atol == 0 && t.rtol == 0 && t.cos_diff == 0) {
      EXPECT_NE(t.why.find("exact"), std::string::npos) << "an all-zero entry must say it is exact";
      EXPECT_EQ(t.ratio_k, 0);
    } else {
      EXPECT_GT(t.atol, 0);
      EXPECT_GT(t.rtol, 0);
      EXPECT_GT(t.cos_diff, 0);
    }
    EXPECT_GT(t.min_pass_fraction, 0);
    EXPECT_LE(t.min_pass_fraction, 1);
    EXPECT_GE(t.ratio_k, 0);
    EXPECT_GE(t.ratio_floor, 0);
    EXPECT_GE(t.ratio_floor_rel, 0);
    // A ratio rule without any floor would fail a kernel whose reference happens to be exact.
    if (t.ratio_k > 0) {
      EXPECT_GT(t.ratio_floor + t.ratio_floor_rel, 0);
    }
    EXPECT_EQ(&lookup(t.name), &t);
  }
}

TEST(ToleranceTable, UnknownNameIsATypedErrorNamingIt) {
  try {
    lookup("attn.out.f16");
    FAIL() << "lookup of an unknown name returned";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn.out.f16"), std::string::npos) << e.what();
  }
}

TEST(ToleranceTable, ToleranceForPicksByOutputDtypeAndCache) {
  using mla::CacheFormat;
  using mla::OutDType;
  using mla::tol::tolerance_for;
  EXPECT_EQ(tolerance_for(OutDType::f64, CacheFormat::bf16, "out").name, "attn.out.f64");
  EXPECT_EQ(tolerance_for(OutDType::f64, CacheFormat::fp8, "lse").name, "attn.lse.f64");
  EXPECT_EQ(tolerance_for(OutDType::f32, CacheFormat::bf16, "out").name, "attn.out.f32");
  EXPECT_EQ(tolerance_for(OutDType::f32, CacheFormat::fp8, "lse").name, "attn.lse.f32");
  EXPECT_EQ(tolerance_for(OutDType::bf16, CacheFormat::bf16, "out").name, "attn.out.bf16");
  EXPECT_EQ(tolerance_for(OutDType::bf16, CacheFormat::bf16, "lse").name, "attn.lse.bf16");
  EXPECT_EQ(tolerance_for(OutDType::bf16, CacheFormat::fp8, "out").name, "attn.out.fp8");
  EXPECT_EQ(tolerance_for(OutDType::bf16, CacheFormat::fp8, "lse").name, "attn.lse.fp8");
  EXPECT_THROW(tolerance_for(OutDType::bf16, CacheFormat::fp8, "probs"), mla::Error);
}

// The table must not be tighter than the precision it is for, nor so loose that the next
// coarser precision slips through. A correctly rounded result of each precision is the best any
// implementation of it can do.
TEST(ToleranceTable, BoundsSeparateThePrecisions) {
  const std::vector<int64_t> shape{4, 2, 16, 512};
  const auto truth = random_values(numel_of(shape), 1);
  std::vector<double> as_f32(truth.size()), as_bf16(truth.size());
  for (std::size_t i = 0; i < truth.size(); ++i) {
    as_f32[i] = static_cast<double>(static_cast<float>(truth[i]));
    as_bf16[i] = static_cast<double>(mla::bf16_to_float(mla::bf16_from_double(truth[i])));
  }
  const auto& f64 = lookup("attn.out.f64");
  const auto& f32 = lookup("attn.out.f32");
  const auto& bf16 = lookup("attn.out.bf16");
  const auto& fp8 = lookup("attn.out.fp8");

  EXPECT_EQ(judge("out", truth, truth, shape, f64).verdict, Verdict::pass);
  // One fp32 rounding anywhere in an "fp64" path is caught...
  const auto f32_as_f64 = judge("out", as_f32, truth, shape, f64);
  EXPECT_EQ(f32_as_f64.verdict, Verdict::fail);
  // ...and is fine for an fp32 implementation, which in turn may not be bf16-accurate only.
  EXPECT_EQ(judge("out", as_f32, truth, shape, f32).verdict, Verdict::pass) << all_reasons(judge("out", as_f32, truth, shape, f32));
  EXPECT_EQ(judge("out", as_bf16, truth, shape, f32).verdict, Verdict::fail);
  // A correctly rounded bf16 output passes the bf16 and fp8 bounds, also against a same-dtype
  // reference that is itself exactly rounded (ratio floor at work).
  const auto b = judge("out", as_bf16, truth, shape, bf16, std::span<const double>(as_bf16));
  EXPECT_EQ(b.verdict, Verdict::pass) << all_reasons(b);
  const auto q = judge("out", as_bf16, truth, shape, fp8, std::span<const double>(as_bf16));
  EXPECT_EQ(q.verdict, Verdict::pass) << all_reasons(q);
}

// docs/field.md, "Bugs", 11: one wrong element in 4M hides from a global cosine check.
TEST(ToleranceEngine, OneBadElementInFourMillionFailsWhileCosineAlonePasses) {
  const std::vector<int64_t> shape{64, 1, 128, 512};
  const int64_t n = numel_of(shape);
  ASSERT_GE(n, 4'000'000);
  const auto truth = random_values(n, 2);
  auto impl = truth;
  const auto& tol = lookup("attn.out.bf16");
  const std::vector<int64_t> bad{13, 0, 77, 301};
  const int64_t f = flat_of(shape, bad);
  double max_abs = 0;
  for (double t : truth) max_abs = std::max(max_abs, std::fabs(t));
  // Far outside atol and outside rtol of the element's own magnitude.
  const double delta = 10 * std::max(mla::tol::effective_atol(tol, max_abs), tol.rtol * std::fabs(truth[f]));
  impl[f] += delta;

  const auto c = judge("out", impl, truth, shape, tol);
  EXPECT_EQ(c.verdict, Verdict::fail);
  EXPECT_LE(c.cos_diff, tol.cos_diff) << "the cosine rule alone would have passed this";
  EXPECT_EQ(c.elements_failed, 1);
  EXPECT_EQ(c.max_abs_index, bad);
  EXPECT_NEAR(c.max_abs_err, delta, 1e-12 * delta);
  EXPECT_DOUBLE_EQ(c.pass_fraction, static_cast<double>(n - 1) / static_cast<double>(n));
  ASSERT_EQ(c.reasons.size(), 1u) << all_reasons(c);
  EXPECT_TRUE(has_reason_containing(c, "1 of 4194304 elements"));
  EXPECT_TRUE(has_reason_containing(c, "[13,0,77,301]")) << all_reasons(c);
  EXPECT_EQ(c.p50_abs_err, 0.0);
}

TEST(ToleranceEngine, MultiIndexIsCOrderForMaxAbsAndMaxRel) {
  const std::vector<int64_t> shape{2, 3, 4, 5};
  auto truth = random_values(numel_of(shape), 3);
  const std::vector<int64_t> at_abs{1, 2, 0, 3}, at_rel{0, 1, 3, 4};
  // A large error on a large value (relative 1/4), and a tiny error on a tiny value
  // (relative 1): the two maxima sit at different elements.
  truth[flat_of(shape, at_abs)] = 2.0;
  truth[flat_of(shape, at_rel)] = 1e-6;
  auto impl = truth;
  impl[flat_of(shape, at_abs)] = 2.5;
  impl[flat_of(shape, at_rel)] = 2e-6;
  const auto c = judge("out", impl, truth, shape, lookup("attn.out.f64"));
  EXPECT_EQ(c.max_abs_index, at_abs);
  EXPECT_EQ(c.max_rel_index, at_rel);
  EXPECT_DOUBLE_EQ(c.max_rel_err, 1.0);
  EXPECT_EQ(c.verdict, Verdict::fail);
}

TEST(ToleranceEngine, NaNMaskMismatchIsCountedWithTheFirstIndex) {
  const std::vector<int64_t> shape{3, 4, 100};
  const auto truth = random_values(numel_of(shape), 4);
  auto impl = truth;
  std::vector<int64_t> flats;
  for (int k = 0; k < 12; ++k) flats.push_back(17 + 31 * k);
  for (auto f : flats) impl[f] = kNaN;
  const auto c = judge("out", impl, truth, shape, lookup("attn.out.f64"));
  EXPECT_EQ(c.verdict, Verdict::fail);
  EXPECT_EQ(c.nan_mismatch, 12);
  EXPECT_EQ(c.elements_failed, 12);
  EXPECT_TRUE(has_reason_containing(c, "NaN mask differs at 12 elements, first [0,0,17]")) << all_reasons(c);
  // NaN where the truth has NaN too is agreement (poisoned-slot goldens rely on exact masks).
  auto truth_nan = truth;
  for (auto f : flats) truth_nan[f] = kNaN;
  const auto ok = judge("out", impl, truth_nan, shape, lookup("attn.out.f64"));
  EXPECT_EQ(ok.verdict, Verdict::pass) << all_reasons(ok);
  // ...and the other direction (NaN in the truth, a number in the result) is a mismatch too.
  const auto rev = judge("out", truth, truth_nan, shape, lookup("attn.out.f64"));
  EXPECT_EQ(rev.nan_mismatch, 12);
}

TEST(ToleranceEngine, InfiniteLseOfEmptyRowsMustMatchExactly) {
  const std::vector<int64_t> shape{2, 8, 3};  // [b, h, s_q]
  auto truth = random_values(numel_of(shape), 5);
  for (auto& x : truth) x = 5 + x;  // typical lse values
  // Sequence 1 is empty: every row has lse = +inf.
  for (int64_t i = 24; i < 48; ++i) truth[i] = kInf;
  const auto& tol = lookup("attn.lse.bf16");

  EXPECT_EQ(judge("lse", truth, truth, shape, tol).verdict, Verdict::pass);

  for (double wrong : {0.0, 1e30, -kInf, kNaN}) {
    auto impl = truth;
    impl[30] = wrong;
    const auto c = judge("lse", impl, truth, shape, tol);
    SCOPED_TRACE(wrong);
    EXPECT_EQ(c.verdict, Verdict::fail);
    EXPECT_EQ(c.nan_mismatch + c.inf_mismatch, 1);
    EXPECT_TRUE(has_reason_containing(c, "mask differs at 1 elements, first [1,2,0]")) << all_reasons(c);
  }
  // An infinite lse where the truth is finite (a row that forgot its keys) fails as well.
  auto impl = truth;
  impl[3] = kInf;
  EXPECT_EQ(judge("lse", impl, truth, shape, tol).inf_mismatch, 1);
}

TEST(ToleranceEngine, ErrorRatioRuleFailsWhenTheKernelIsMuchWorseThanTheSameDtypeReference) {
  const std::vector<int64_t> shape{2, 1, 16, 512};
  const int64_t n = numel_of(shape);
  auto truth = random_values(n, 6);
  const auto& tol = lookup("attn.out.bf16");
  ASSERT_GT(tol.ratio_k, 0);
  const int64_t big = 1000;
  truth[big] = 1.0;  // the element that carries the kernel's error
  double max_abs_truth = 0;
  for (double t : truth) max_abs_truth = std::max(max_abs_truth, std::fabs(t));
  const double floor = tol.ratio_floor + tol.ratio_floor_rel * max_abs_truth;

  // A reference with a small, uniform error; the kernel is exact except at `big`, where its
  // error is within rtol (so the element rule passes) but beyond k·ref + floor.
  const double ref_err = tol.atol / 8;
  std::vector<double> same(truth);
  for (auto& x : same) x += ref_err;
  const double limit = tol.ratio_k * ref_err + floor;
  const double kernel_err = std::min(0.9 * tol.rtol * truth[big], 2 * limit);
  ASSERT_GT(kernel_err, limit) << "table too loose for this test: rtol no longer exceeds the ratio limit";
  auto impl = truth;
  impl[big] += kernel_err;

  const auto c = judge("out", impl, truth, shape, tol, std::span<const double>(same));
  EXPECT_EQ(c.verdict, Verdict::fail);
  ASSERT_EQ(c.reasons.size(), 1u) << all_reasons(c);
  EXPECT_TRUE(has_reason_containing(c, "error ratio")) << all_reasons(c);
  ASSERT_TRUE(c.same_dtype_max_abs_err.has_value());
  EXPECT_NEAR(*c.same_dtype_max_abs_err, ref_err, 1e-12);
  ASSERT_TRUE(c.error_ratio.has_value());
  EXPECT_NEAR(*c.error_ratio, kernel_err / ref_err, 1e-6 * kernel_err / ref_err);
  ASSERT_TRUE(c.error_ratio_limit.has_value());
  EXPECT_NEAR(*c.error_ratio_limit, limit, 1e-15);

  // The same kernel is acceptable next to a reference that is itself that inaccurate.
  std::vector<double> worse(truth);
  for (auto& x : worse) x += kernel_err;
  EXPECT_EQ(judge("out", impl, truth, shape, tol, std::span<const double>(worse)).verdict, Verdict::pass);
  // Without a reference the rule cannot apply; the element rules alone pass.
  const auto no_ref = judge("out", impl, truth, shape, tol);
  EXPECT_EQ(no_ref.verdict, Verdict::pass);
  EXPECT_FALSE(no_ref.error_ratio.has_value());
  // With ratio_k == 0 the ratio is recorded but does not gate.
  const auto& lse_tol = lookup("attn.lse.bf16");
  ASSERT_EQ(lse_tol.ratio_k, 0);
  auto lse_impl = truth;
  const auto info = judge("lse", lse_impl, truth, shape, lse_tol, std::span<const double>(same));
  EXPECT_EQ(info.verdict, Verdict::pass);
  EXPECT_TRUE(info.error_ratio.has_value());
  EXPECT_FALSE(info.error_ratio_limit.has_value());
}

TEST(ToleranceEngine, CosineRuleAndItsDefinition) {
  const std::vector<int64_t> shape{1000};
  const auto truth = random_values(1000, 7);
  const auto& tol = lookup("attn.out.bf16");
  // A small uniform scale error passes every element but drifts the whole vector.
  const double eps = 4 * std::sqrt(tol.cos_diff);
  std::vector<double> scaled(truth);
  for (auto& x : scaled) x *= 1 + eps;
  const auto c = judge("out", scaled, truth, shape, lookup("attn.out.f32"));
  // 1 − 2Σxy/Σ(x²+y²) with x = (1+ε)y is ε²/(2+2ε+ε²), independent of y.
  const double expect = eps * eps / (2 + 2 * eps + eps * eps);
  EXPECT_NEAR(c.cos_diff, expect, 1e-9 * expect);
  // Sign flip: cos diff 2, and a reason in the documented format.
  std::vector<double> flipped(truth);
  for (auto& x : flipped) x = -x;
  const auto f = judge("out", flipped, truth, shape, tol);
  EXPECT_NEAR(f.cos_diff, 2.0, 1e-12);
  EXPECT_TRUE(has_reason_containing(f, "cos diff 2 > ")) << all_reasons(f);
  // Both all-zero: defined as 0, and it passes.
  const std::vector<double> zeros(1000, 0.0);
  const auto z = judge("out", zeros, zeros, shape, tol);
  EXPECT_EQ(z.cos_diff, 0.0);
  EXPECT_EQ(z.verdict, Verdict::pass);
}

TEST(ToleranceEngine, PercentilesAreNearestRankOfTheAbsoluteErrors) {
  const int64_t n = 1237;
  const std::vector<int64_t> shape{n};
  const auto truth = random_values(n, 8);
  const auto noise = random_values(n, 9);
  std::vector<double> impl(truth);
  std::vector<double> errs;
  for (int64_t i = 0; i < n; ++i) {
    impl[i] = truth[i] + 1e-5 * noise[i];
    errs.push_back(std::fabs(impl[i] - truth[i]));
  }
  std::sort(errs.begin(), errs.end());
  auto rank = [&](double p) { return errs[static_cast<std::size_t>(std::ceil(p * n)) - 1]; };
  const auto c = judge("out", impl, truth, shape, lookup("attn.out.f32"));
  EXPECT_EQ(c.p50_abs_err, rank(0.50));
  EXPECT_EQ(c.p99_abs_err, rank(0.99));
  EXPECT_EQ(c.max_abs_err, errs.back());
}

TEST(ToleranceEngine, BoundsAreInclusiveAndEitherRuleSuffices) {
  const std::vector<int64_t> shape{3};
  const auto& tol = lookup("attn.out.bf16");
  // Element 0: error exactly atol (truth tiny, rtol useless). Element 1: error exactly
  // rtol·|t| with t large (atol useless). Element 2: exact.
  const std::vector<double> truth{1.0 / 1024, 4.0, 0.5};
  const double atol = mla::tol::effective_atol(tol, 4.0);
  ASSERT_GT(tol.rtol * truth[1], atol) << "element 1 would not exercise rtol";
  const std::vector<double> impl{truth[0] + exact_step(truth[0], atol),
                                 truth[1] + exact_step(truth[1], tol.rtol * truth[1]), 0.5};
  const auto c = judge("out", impl, truth, shape, tol);
  EXPECT_EQ(c.elements_failed, 0) << all_reasons(c);
  EXPECT_EQ(c.atol_used, atol);
  EXPECT_LE(c.max_bound_use, 1.0);
  EXPECT_GT(c.max_bound_use, 0.999);
  // Just outside both: fails.
  const std::vector<double> worse{truth[0] + 2 * atol, truth[1] + 2 * tol.rtol * truth[1], 0.5};
  const auto w = judge("out", worse, truth, shape, tol);
  EXPECT_EQ(w.elements_failed, 2);
  EXPECT_NEAR(w.max_bound_use, 2.0, 1e-9);
}

// In P·V every element carries rounding errors of the largest terms, so the absolute bound
// follows the tensor's magnitude: the same relative picture passes at any scale, and an error
// that is small next to the largest value is not failed just because its element is near 0.
TEST(ToleranceEngine, AbsoluteBoundScalesWithTheLargestMagnitude) {
  const auto& tol = lookup("attn.out.bf16");
  ASSERT_GT(tol.atol_rel_max, 0);
  const std::vector<int64_t> shape{1000};
  const auto base = random_values(1000, 11);
  for (double scale : {1.0, 1e3, 1e6}) {  // magnitudes where the relative part governs
    SCOPED_TRACE(scale);
    std::vector<double> truth(base), impl(base);
    double max_abs = 0;
    for (auto& x : truth) x *= scale, max_abs = std::max(max_abs, std::fabs(x));
    truth[5] = 0.0;  // a near-zero output in a tensor of magnitude `scale`
    for (std::size_t i = 0; i < impl.size(); ++i) impl[i] = truth[i];
    const double atol = mla::tol::effective_atol(tol, max_abs);
    EXPECT_EQ(atol, std::max(tol.atol, tol.atol_rel_max * max_abs));
    impl[5] = 0.5 * atol;
    EXPECT_EQ(judge("out", impl, truth, shape, tol).verdict, Verdict::pass);
    impl[5] = 2 * atol;
    const auto c = judge("out", impl, truth, shape, tol);
    EXPECT_EQ(c.elements_failed, 1);
    EXPECT_EQ(c.max_abs_index, std::vector<int64_t>{5});
  }
}

TEST(ToleranceEngine, ResultSizeMismatchFailsReferenceSizeMismatchThrows) {
  const std::vector<int64_t> shape{2, 3};
  const std::vector<double> truth(6, 1.0), short_impl(5, 1.0);
  const auto& tol = lookup("attn.out.f64");
  const auto c = judge("out", short_impl, truth, shape, tol);
  EXPECT_EQ(c.verdict, Verdict::fail);
  EXPECT_TRUE(has_reason_containing(c, "shape mismatch: result has 5 elements, shape [2,3] needs 6"))
      << all_reasons(c);
  EXPECT_THROW(judge("out", truth, short_impl, shape, tol), mla::Error);
  EXPECT_THROW(judge("out", truth, truth, shape, tol, std::span<const double>(short_impl)), mla::Error);
}

TEST(ToleranceEngine, EmptyTensorPasses) {
  const std::vector<int64_t> shape{0, 16, 512};
  const std::vector<double> none;
  const auto c = judge("out", none, none, shape, lookup("attn.out.bf16"), std::span<const double>(none));
  EXPECT_EQ(c.verdict, Verdict::pass);
  EXPECT_EQ(c.numel, 0);
  EXPECT_EQ(c.pass_fraction, 1.0);
}

TEST(ToleranceEngine, ComparisonJsonRoundTripsIncludingInfinities) {
  const std::vector<int64_t> shape{2, 2};
  const std::vector<double> truth{0.0, 1.0, kInf, 2.0};
  const std::vector<double> impl{1e-3, 1.0, 3.0, 2.0};  // infinite rel err at [0,0], inf mask
  const std::vector<double> same{0.0, 1.0, kInf, 2.5};
  const auto c = judge("lse", impl, truth, shape, lookup("attn.out.bf16"), std::span<const double>(same));
  ASSERT_TRUE(std::isinf(c.max_rel_err));
  const auto j = mla::tol::to_json(c);
  const auto text = j.dump();
  const auto back = mla::tol::comparison_from_json(nlohmann::json::parse(text));
  EXPECT_EQ(mla::tol::to_json(back), j);
  EXPECT_EQ(back.verdict, c.verdict);
  EXPECT_EQ(back.reasons, c.reasons);
  EXPECT_TRUE(std::isinf(back.max_rel_err));
  EXPECT_EQ(back.error_ratio_limit, c.error_ratio_limit);
  EXPECT_THROW(mla::tol::comparison_from_json(nlohmann::json::parse("{\"what\": 1}")), mla::Error);
}

TEST(ToleranceEngine, VerdictNamesRoundTrip) {
  for (auto v : {Verdict::pass, Verdict::fail, Verdict::unsupported, Verdict::error, Verdict::skipped,
                 Verdict::not_claimed, Verdict::host_error}) {
    EXPECT_EQ(mla::tol::verdict_from_string(mla::tol::to_string(v)), v);
  }
  EXPECT_THROW(mla::tol::verdict_from_string("OK"), mla::Error);
}

}  // namespace
