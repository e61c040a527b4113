// L1: the table against the catalog. The bf16 and FP8 entries claim that a correct
// deployed-precision kernel passes them with room to spare; the golden same-dtype reference
// (fp32 softmax, P rounded to bf16, bf16 output — what such a kernel computes) is the witness.
// It must pass every case with the headroom the error-ratio rule grants a kernel (its bound
// use at most 1/2, its cosine difference at most cos_diff / k²), and a copy of it with a
// realistic defect must fail. Skipped when the catalog has not been generated.
#include <gtest/gtest.h>

#include <H5Cpp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/ref/same_dtype.hpp"

namespace {

namespace fs = std::filesystem;
using mla::tol::Verdict;

// Only the four result arrays and the cache format: no inputs, so the long generated cases
// cost a few hundred kilobytes here instead of a regenerated 10^8-value cache.
struct Results {
  std::string name;
  mla::CacheFormat format = mla::CacheFormat::bf16;
  std::vector<int64_t> out_shape, lse_shape;
  std::vector<double> truth_out, truth_lse, same_out, same_lse;
};

template <class T>
std::vector<T> read(const H5::Group& g, const std::string& path, const H5::PredType& type,
                    std::vector<int64_t>& shape) {
  H5::DataSet ds = g.openDataSet(path);
  H5::DataSpace sp = ds.getSpace();
  std::vector<hsize_t> dims(static_cast<std::size_t>(sp.getSimpleExtentNdims()));
  sp.getSimpleExtentDims(dims.data());
  shape.assign(dims.begin(), dims.end());
  std::vector<T> v(static_cast<std::size_t>(sp.getSimpleExtentNpoints()));
  ds.read(v.data(), type);
  return v;
}

Results read_results(const fs::path& file, const std::string& name) {
  H5::Exception::dontPrint();
  H5::H5File f(file.string(), H5F_ACC_RDONLY);
  H5::Group g = f.openGroup("/cases/" + name);
  Results r;
  r.name = name;
  std::string fmt;
  g.openAttribute("cache_format").read(g.openAttribute("cache_format").getStrType(), fmt);
  r.format = mla::cache_format_from_string(fmt);
  std::vector<int64_t> s1, s2;
  r.truth_out = read<double>(g, "truth/out", H5::PredType::NATIVE_DOUBLE, r.out_shape);
  r.truth_lse = read<double>(g, "truth/lse", H5::PredType::NATIVE_DOUBLE, r.lse_shape);
  for (uint16_t bits : read<uint16_t>(g, "same_dtype/out", H5::PredType::NATIVE_UINT16, s1)) {
    r.same_out.push_back(mla::bf16_to_float(bits));
  }
  for (float x : read<float>(g, "same_dtype/lse", H5::PredType::NATIVE_FLOAT, s2)) r.same_lse.push_back(x);
  EXPECT_EQ(s1, r.out_shape);
  EXPECT_EQ(s2, r.lse_shape);
  return r;
}

std::vector<Results> all_results() {
  const auto catalog = mla::golden::open_catalog(mla::golden::default_goldens_dir());
  std::vector<Results> out;
  for (const auto& family : mla::golden::family_names(mla::golden::FamilyKind::attention)) {
    const auto file = catalog.file(family + ".h5");
    for (const auto& name : mla::golden::read_file_info(file).cases) {
      out.push_back(read_results(file, name));
      out.back().name = family + "/" + name;
    }
  }
  return out;
}

class TableOnCatalog : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = mla::golden::default_goldens_dir();
    if (!fs::exists(dir / "MANIFEST.sha256")) GTEST_SKIP() << "no golden catalog at " << dir;
    if (results_.empty()) results_ = all_results();
  }
  static inline std::vector<Results> results_;
};

std::string reasons(const mla::tol::Comparison& c) {
  std::string s;
  for (const auto& r : c.reasons) s += r + "; ";
  return s;
}

#ifndef MLA_TOLERANCE_WITNESS_ALL  // the L1 build runs these; the L2 one only the class below
TEST_F(TableOnCatalog, TheSameDtypeReferencePassesItsOwnEntriesWithHeadroom) {
  ASSERT_FALSE(results_.empty());
  for (const auto& r : results_) {
    SCOPED_TRACE(r.name);
    for (const char* what : {"out", "lse"}) {
      const auto& tol = mla::tol::tolerance_for(mla::OutDType::bf16, r.format, what);
      const bool out = std::string(what) == "out";
      const auto& impl = out ? r.same_out : r.same_lse;
      const auto& truth = out ? r.truth_out : r.truth_lse;
      const auto& shape = out ? r.out_shape : r.lse_shape;
      const auto c = mla::tol::judge(what, impl, truth, shape, tol, std::span<const double>(impl));
      EXPECT_EQ(c.verdict, Verdict::pass) << what << ": " << reasons(c);
      // The ratio rule lets a kernel be k times as far off as this reference; the element and
      // cosine bounds must leave it that room too (2x in the element bound at least).
      EXPECT_LE(c.max_bound_use, 0.5) << what << " (" << tol.name << ")";
      const double k = std::max(tol.ratio_k, 2.0);
      EXPECT_LE(c.cos_diff, tol.cos_diff / (k * k)) << what << " (" << tol.name << ")";
    }
  }
}

// The other direction: the entries are not so loose that a kernel with a real defect passes.
// Each defect is applied to the reference itself, so the only thing that changes is the defect.
TEST_F(TableOnCatalog, DefectsOnTopOfTheReferenceFail) {
  int cases = 0;
  for (const auto& r : results_) {
    SCOPED_TRACE(r.name);
    const auto& tol = mla::tol::tolerance_for(mla::OutDType::bf16, r.format, "out");
    double max_abs = 0;
    int64_t at = -1;
    for (std::size_t i = 0; i < r.truth_out.size(); ++i) {
      if (std::fabs(r.truth_out[i]) > max_abs) max_abs = std::fabs(r.truth_out[i]), at = static_cast<int64_t>(i);
    }
    if (max_abs == 0) continue;  // all rows empty: nothing to perturb
    ++cases;
    // (1) Output accumulated in bf16 instead of fp32: every element one bf16 ulp of its row off
    // is what a lost fp32 accumulator looks like; here the largest element is off by 4 ulps.
    auto one_bad = r.same_out;
    one_bad[at] += 4 * tol.atol_rel_max * max_abs + 2 * tol.rtol * std::fabs(r.truth_out[at]);
    const auto c1 = mla::tol::judge("out", one_bad, r.truth_out, r.out_shape, tol, std::span<const double>(r.same_out));
    EXPECT_EQ(c1.verdict, Verdict::fail) << "one element 4 ulps of max|truth| off passed";
    // (2) A uniform relative bias (a mis-scaled softmax denominator or FP8 scale): the error
    // ratio and the cosine rule must catch it even where every element passes. 1% for bf16;
    // 5% for FP8, whose reference noise is larger (edge values up to 1e3) — still far below a
    // wrong scale (up to 2x when ue8m0 rounding is misapplied).
    const double bias = r.format == mla::CacheFormat::fp8 ? 0.05 : 0.01;
    auto biased = r.same_out;
    for (auto& x : biased) x *= 1 + bias;
    const auto c2 = mla::tol::judge("out", biased, r.truth_out, r.out_shape, tol, std::span<const double>(r.same_out));
    EXPECT_EQ(c2.verdict, Verdict::fail) << "a " << 100 * bias << "% bias passed";
    // (3) The same-dtype lse shifted by one bf16 rounding of its value (lse kept in bf16).
    const auto& lt = mla::tol::tolerance_for(mla::OutDType::bf16, r.format, "lse");
    auto lse_bf16 = r.same_lse;
    bool changed = false;
    for (auto& x : lse_bf16) {
      if (!std::isfinite(x)) continue;
      const double y = mla::bf16_to_float(mla::bf16_from_double(x));
      changed = changed || y != x;
      x = y;
    }
    const auto c3 = mla::tol::judge("lse", lse_bf16, r.truth_lse, r.lse_shape, lt, std::span<const double>(r.same_lse));
    if (changed && r.format == mla::CacheFormat::bf16) {
      EXPECT_EQ(c3.verdict, Verdict::fail) << "an lse kept in bf16 passed";
    }
  }
  EXPECT_GT(cases, 0);
}

#endif  // MLA_TOLERANCE_WITNESS_ALL

// ---- the precision class bf16/f32/f32 ---------------------------------------------------------
// No golden stores its witness (the goldens' same-dtype output is rounded to bf16), so it is
// computed here from each case's inputs: mla/ref/same_dtype.hpp with the P·V sums left in fp32,
// the computation a correct kernel of the class performs (bf16 operands, FP8 dequantized into
// bf16, fp32 softmax and accumulation, fp32 output). L1 measures the cases up to
// kWitnessMaxTokens cache tokens; the L2 build (MLA_TOLERANCE_WITNESS_ALL) the long ones too.
#ifdef MLA_TOLERANCE_WITNESS_ALL
constexpr int64_t kWitnessMaxTokens = INT64_MAX;
#define ClassOnCatalog ClassOnWholeCatalog  // its own test names next to the L1 build's
#else
constexpr int64_t kWitnessMaxTokens = 16384;
#endif
const mla::PrecisionClass kBf16Operands{mla::OutDType::bf16, mla::OutDType::f32, mla::OutDType::f32};

struct Witnessed {
  std::string name;
  mla::CacheFormat format = mla::CacheFormat::bf16;
  mla::ScaleFmt scale_fmt = mla::ScaleFmt::fp32;
  std::vector<int64_t> out_shape, lse_shape;
  std::vector<double> truth_out, truth_lse, same_out, same_lse, witness_out, witness_lse;
};

std::vector<Witnessed> witnessed_cases() {
  const auto catalog = mla::golden::open_catalog(mla::golden::default_goldens_dir());
  std::vector<Witnessed> out;
  for (const auto& family : mla::golden::family_names(mla::golden::FamilyKind::attention)) {
    const auto file = catalog.file(family + ".h5");
    for (const auto& name : mla::golden::read_file_info(file).cases) {
      if (mla::golden::read_attn_header(file, name).cache_tokens() > kWitnessMaxTokens) continue;
      const auto c = mla::golden::load_attn_case(file, name);
      Witnessed w;
      w.name = family + "/" + name;
      w.format = c.shape.cache_format;
      w.scale_fmt = c.scale_fmt;
      w.out_shape = mla::out_shape(c.shape);
      w.lse_shape = mla::lse_shape(c.shape);
      w.truth_out = c.truth_out;
      w.truth_lse = c.truth_lse;
      for (uint16_t b : c.same_dtype_out) w.same_out.push_back(mla::bf16_to_float(b));
      w.same_lse.assign(c.same_dtype_lse.begin(), c.same_dtype_lse.end());
      auto r = mla::ref::attention_same_dtype(c.view(), mla::OutDType::f32);
      w.witness_out = std::move(r.out);
      w.witness_lse = std::move(r.lse);
      out.push_back(std::move(w));
    }
  }
  return out;
}

class ClassOnCatalog : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = mla::golden::default_goldens_dir();
    if (!fs::exists(dir / "MANIFEST.sha256")) GTEST_SKIP() << "no golden catalog at " << dir;
    if (cases_.empty()) cases_ = witnessed_cases();
  }
  static inline std::vector<Witnessed> cases_;
};

// The class's entries against its witness, with the headroom the bf16 entries get from theirs
// (bound use <= 1/2, cosine <= cos_diff / k², and here also the error-ratio rule: the witness is
// judged against the bf16-output reference, and must use at most half of its limit).
TEST_F(ClassOnCatalog, TheBf16OperandWitnessPassesItsEntriesWithHeadroom) {
  ASSERT_FALSE(cases_.empty());
  double worst_use = 0, worst_cos = 0, worst_ratio = 0;
  for (const auto& w : cases_) {
    SCOPED_TRACE(w.name);
    for (const char* what : {"out", "lse"}) {
      const bool out = std::string(what) == "out";
      const auto& tol = mla::tol::tolerance_for(kBf16Operands, w.format, what);
      const auto c = mla::tol::judge(what, out ? w.witness_out : w.witness_lse, out ? w.truth_out : w.truth_lse,
                                     out ? w.out_shape : w.lse_shape, tol,
                                     std::span<const double>(out ? w.same_out : w.same_lse));
      EXPECT_EQ(c.verdict, Verdict::pass) << what << ": " << reasons(c);
      EXPECT_LE(c.max_bound_use, 0.5) << what << " (" << tol.name << ")";
      const double k = std::max(tol.ratio_k, 2.0);
      EXPECT_LE(c.cos_diff, tol.cos_diff / (k * k)) << what << " (" << tol.name << ")";
      if (c.error_ratio_limit && *c.error_ratio_limit > 0) {
        EXPECT_LE(c.max_abs_err, 0.5 * *c.error_ratio_limit) << what << " (" << tol.name << ")";
        if (out) worst_ratio = std::max(worst_ratio, c.max_abs_err / *c.error_ratio_limit);
      }
      if (out) {
        worst_use = std::max(worst_use, c.max_bound_use);
        worst_cos = std::max(worst_cos, c.cos_diff / tol.cos_diff);
      }
    }
  }
  std::printf("bf16/f32/f32 witness on %zu cases: out bound use <= %.3g, cos <= %.3g of its bound, error "
              "<= %.3g of the ratio limit\n",
              cases_.size(), worst_use, worst_cos, worst_ratio);
}

// Why the class exists: the float32 entries, which a kernel declaring f32 output and nothing else
// is held to, fail the same correct computation wherever bf16 dequantization of float32-scaled
// FP8 values rounds (a power-of-two ue8m0 scale leaves e4m3 · scale exact in bf16).
TEST_F(ClassOnCatalog, TheF32EntriesFailTheWitnessOnFloat32ScaledFp8) {
  int fp32_scaled = 0;
  for (const auto& w : cases_) {
    if (w.format != mla::CacheFormat::fp8 || w.scale_fmt != mla::ScaleFmt::fp32) continue;
    SCOPED_TRACE(w.name);
    ++fp32_scaled;
    const auto& f32 = mla::tol::tolerance_for(mla::OutDType::f32, w.format, "out");
    const auto c = mla::tol::judge("out", w.witness_out, w.truth_out, w.out_shape, f32, std::span<const double>(w.same_out));
    EXPECT_EQ(c.verdict, Verdict::fail) << "the f32 entry is loose enough for bf16 operands";
  }
  EXPECT_GT(fp32_scaled, 0);
}

// The other direction: the class's entries are not so loose that the witness with a real defect
// passes.
TEST_F(ClassOnCatalog, DefectsOnTopOfTheWitnessFail) {
  int cases = 0;
  for (const auto& w : cases_) {
    SCOPED_TRACE(w.name);
    const auto& tol = mla::tol::tolerance_for(kBf16Operands, w.format, "out");
    double max_abs = 0;
    int64_t at = -1;
    for (std::size_t i = 0; i < w.truth_out.size(); ++i) {
      if (std::fabs(w.truth_out[i]) > max_abs) max_abs = std::fabs(w.truth_out[i]), at = static_cast<int64_t>(i);
    }
    if (max_abs == 0) continue;
    ++cases;
    const std::span<const double> ref(w.same_out);
    auto one_bad = w.witness_out;
    one_bad[at] += 4 * tol.atol_rel_max * max_abs + 2 * tol.rtol * std::fabs(w.truth_out[at]);
    EXPECT_EQ(mla::tol::judge("out", one_bad, w.truth_out, w.out_shape, tol, ref).verdict, Verdict::fail)
        << "one element 4 ulps of max|truth| off passed";
    const double bias = w.format == mla::CacheFormat::fp8 ? 0.05 : 0.01;
    auto biased = w.witness_out;
    for (auto& x : biased) x *= 1 + bias;
    EXPECT_EQ(mla::tol::judge("out", biased, w.truth_out, w.out_shape, tol, ref).verdict, Verdict::fail)
        << "a " << 100 * bias << "% bias passed";
  }
  EXPECT_GT(cases, 0);
}

}  // namespace
