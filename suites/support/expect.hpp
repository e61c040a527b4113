// Judging helpers for the tests: an attention result goes through THE judge (judge_attention),
// exactly as the certifier judges it; any other tensor (layer outputs, intermediates) through the
// tolerance engine with a named entry of the one table; bitwise comparisons say so.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "mla/core/tolerance.hpp"
#include "mla/judge/attention.hpp"
#include "mla/ref/attention.hpp"

namespace mla::testing {

// The largest errors seen over a series of comparisons, for the test's recorded properties.
struct Worst {
  double abs = 0, rel = 0;
  void add(const tol::Comparison& c) {
    abs = std::max(abs, c.max_abs_err);
    rel = std::max(rel, c.max_rel_err);
  }
  std::string str() const { return fmt::format("max_abs {:.3g} max_rel {:.3g}", abs, rel); }
};

inline ::testing::AssertionResult judged(const std::string& what, std::span<const double> impl,
                                         std::span<const double> truth, const std::vector<int64_t>& shape,
                                         const tol::Tolerance& t, Worst* worst = nullptr) {
  const tol::Comparison c = tol::judge(what, impl, truth, shape, t);
  if (worst) worst->add(c);
  if (c.verdict == tol::Verdict::pass) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " fails '" << t.name << "': " << fmt::format("{}", fmt::join(c.reasons, "; "))
                                       << " (max abs " << c.max_abs_err << " at " << tol::format_index(c.max_abs_index)
                                       << ", max rel " << c.max_rel_err << ")";
}

inline ::testing::AssertionResult judged(const std::string& what, std::span<const double> impl,
                                         std::span<const double> truth, const std::vector<int64_t>& shape,
                                         const char* tol_name, Worst* worst = nullptr) {
  return judged(what, impl, truth, shape, tol::lookup(tol_name), worst);
}

// An attention result against its truth through judge_attention (the certificate's rules: the
// entries of the result's dtype and cache format, the error ratio armed when `truth` carries a
// deployed-precision reference). `declared` defaults to what it produced; `seen` receives the
// judgement. The failure message carries every failed rule and the worst element's index.
inline ::testing::AssertionResult matches(const std::string& what, const AttnOutputs& got, const AttnShape& shape,
                                          const AttentionTruth& truth, std::optional<OutDType> declared = std::nullopt,
                                          AttentionJudgement* seen = nullptr) {
  const AttentionJudgement j = judge_attention(shape, Declaration{declared.value_or(got.dtype)}, got, truth);
  if (seen) *seen = j;
  if (j.pass()) return ::testing::AssertionSuccess();
  auto describe = [](const tol::Comparison& c) {
    if (c.verdict == tol::Verdict::pass) return std::string();
    return fmt::format("\n  {} ('{}'): max abs {:.3g} at {}, max rel {:.3g} at {}, {} of {} elements outside, NaN "
                       "mismatches {}, Inf mismatches {}{}",
                       c.what, c.tolerance, c.max_abs_err, tol::format_index(c.max_abs_index), c.max_rel_err,
                       tol::format_index(c.max_rel_index), c.elements_failed, c.numel, c.nan_mismatch, c.inf_mismatch,
                       c.error_ratio ? fmt::format(", error ratio {:.3g}", *c.error_ratio) : std::string());
  };
  return ::testing::AssertionFailure() << what << ": " << fmt::format("{}", fmt::join(j.reasons, "; ")) << describe(j.out)
                                       << describe(j.lse);
}

// An fp64 oracle's result (mla/ref) judged as an fp64 implementation's against `truth`.
inline ::testing::AssertionResult matches(const std::string& what, const ref::AttnResult& got, const AttnShape& shape,
                                          const ref::AttnResult& truth, AttentionJudgement* seen = nullptr) {
  AttnOutputs o;
  o.dtype = OutDType::f64;
  o.out = got.out;
  o.lse = got.lse;
  AttentionTruth t;
  t.out = truth.out;
  t.lse = truth.lse;
  return matches(what, o, shape, t, std::nullopt, seen);
}

// Bit-for-bit equality (NaN == NaN when the bits agree): for properties that hold exactly.
inline ::testing::AssertionResult bitwise_equal(const std::string& what, std::span<const double> a,
                                                std::span<const double> b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
      return ::testing::AssertionFailure() << what << ": first difference at flat index " << i << ": "
                                           << fmt::format("{:.17g} vs {:.17g}", a[i], b[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mla::testing
