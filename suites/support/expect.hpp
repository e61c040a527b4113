// Judging helpers for the tests: every numeric comparison goes through the tolerance engine
// with a named entry of the one table; bitwise comparisons say so.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "mla/core/tolerance.hpp"

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
