#include "mla/judge/topk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {
namespace {

// Enough reasons to see the pattern of a failure without drowning a report in one per row.
constexpr std::size_t kMaxReasons = 24;

struct Collector {
  TopkJudgement& j;
  int64_t dropped = 0;
  void add(std::string why) {
    if (j.reasons.size() < kMaxReasons) j.reasons.push_back(std::move(why));
    else ++dropped;
  }
};

// One row's selection: its reasons into `c`; its dominance gap in units of tol is returned.
// `chosen` is scratch of n entries, all -1 on entry and on return (slot of each chosen column).
double judge_row(const TopkInputs& in, int64_t r, std::span<const int64_t> got, const tol::Tolerance& t,
                 bool sorted, std::vector<int64_t>& chosen, Collector& c) {
  const auto& s = in.shape;
  const int64_t b = in.starts[static_cast<std::size_t>(r)], e = in.ends[static_cast<std::size_t>(r)];
  const auto logit = [&](int64_t j) { return in.logits[static_cast<std::size_t>(r * s.n + j)]; };
  int64_t valid = 0;
  double magnitude = 0;
  for (int64_t j = b; j < e; ++j) {
    if (std::isfinite(logit(j))) ++valid, magnitude = std::max(magnitude, std::abs(static_cast<double>(logit(j))));
  }
  const double tol = tol::effective_atol(t, magnitude);
  const std::size_t reasons_before = c.j.reasons.size() + static_cast<std::size_t>(c.dropped);
  int64_t count = 0, first_pad = -1, min_at = -1, prev_at = -1;
  bool pad_said = false;
  float min_sel = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < s.k; ++i) {
    const int64_t x = got[static_cast<std::size_t>(i)];
    if (x == -1) {
      if (first_pad < 0) first_pad = i;
      continue;
    }
    if (first_pad >= 0 && !pad_said) {
      c.add(fmt::format("row {}: slot {} holds index {} after the -1 padding at slot {} (padding must be trailing)",
                        r, i, x, first_pad));
      pad_said = true;  // once per row; the later entries are still judged
    }
    if (x < 0 || x >= s.n) {
      c.add(fmt::format("row {}: slot {} holds index {}, outside the logits row [0, {})", r, i, x, s.n));
      continue;
    }
    if (x < b || x >= e) {
      c.add(fmt::format("row {}: slot {} holds index {} (logit {}), outside the row's valid range [{}, {})", r, i, x,
                        logit(x), b, e));
      continue;
    }
    const float v = logit(x);
    if (!std::isfinite(v)) {
      c.add(fmt::format("row {}: slot {} holds index {}, a masked position (logit {})", r, i, x, v));
      continue;
    }
    if (chosen[static_cast<std::size_t>(x)] >= 0) {
      c.add(fmt::format("row {}: index {} appears twice (slots {} and {})", r, x, chosen[static_cast<std::size_t>(x)], i));
      continue;
    }
    chosen[static_cast<std::size_t>(x)] = i;
    ++count;
    if (sorted && prev_at >= 0 && static_cast<double>(v) > static_cast<double>(logit(prev_at)) + tol) {
      c.add(fmt::format("row {}: declared sorted, but slot {} (index {}, logit {}) exceeds the one before it (index {}, "
                        "logit {}) by more than tol {:.3g}",
                        r, i, x, v, prev_at, logit(prev_at), tol));
    }
    prev_at = x;
    if (v < min_sel) min_sel = v, min_at = x;
  }
  const int64_t want = std::min<int64_t>(s.k, valid);
  if (count != want) {
    c.add(fmt::format("row {}: {} valid distinct indices, expected min(k = {}, valid positions = {}) = {}", r, count,
                      s.k, valid, want));
  }
  // The best excluded valid position against the worst selected one: the whole of set dominance.
  double gap_use = 0;
  if (count > 0) {
    int64_t best_at = -1;
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t j = b; j < e; ++j) {
      const float v = logit(j);
      if (std::isfinite(v) && chosen[static_cast<std::size_t>(j)] < 0 && v > best) best = v, best_at = j;
    }
    // The gap in double: two float32 values never overflow there, and their difference is exact
    // unless their exponents are far apart, and then within 2^-53 of it: nothing against a tol.
    const double gap = static_cast<double>(best) - static_cast<double>(min_sel);
    if (best_at >= 0 && gap > 0) {
      gap_use = gap / tol;
      if (gap > tol) {
        c.add(fmt::format("row {}: excluded position {} (logit {}) beats selected index {} (logit {}) by {:.6g} > tol "
                          "{:.3g} (a clear top-{} member was dropped)",
                          r, best_at, best, min_at, min_sel, gap, tol, s.k));
      }
    }
  }
  for (int64_t i = 0; i < s.k; ++i) {
    const int64_t x = got[static_cast<std::size_t>(i)];
    if (x >= 0 && x < s.n) chosen[static_cast<std::size_t>(x)] = -1;
  }
  if (c.j.reasons.size() + static_cast<std::size_t>(c.dropped) > reasons_before) ++c.j.rows_failed;
  return gap_use;
}

}  // namespace

const tol::Tolerance& topk_tolerance(LogitsPrecision p) {
  return tol::lookup(fmt::format("topk.dominance.{}", to_string(p)));
}

TopkJudgement judge_topk(const TopkInputs& in, const TopkOutputs& got, LogitsPrecision precision, bool sorted) {
  validate_topk_inputs(in, "judge_topk");
  const auto& s = in.shape;
  const auto& t = topk_tolerance(precision);
  TopkJudgement j;
  if (static_cast<int64_t>(got.indices.size()) != s.rows * s.k) {
    j.reasons.push_back(fmt::format("indices has {} elements, the shape [rows = {}, k = {}] needs {}",
                                    got.indices.size(), s.rows, s.k, s.rows * s.k));
    j.rows_failed = s.rows;
    return j;
  }
  Collector c{j};
  std::vector<int64_t> chosen(static_cast<std::size_t>(s.n), -1);
  for (int64_t r = 0; r < s.rows; ++r) {
    const std::span<const int64_t> row(got.indices.data() + r * s.k, static_cast<std::size_t>(s.k));
    j.max_bound_use = std::max(j.max_bound_use, judge_row(in, r, row, t, sorted, chosen, c));
  }
  if (c.dropped > 0) j.reasons.push_back(fmt::format("... and {} more reasons", c.dropped));
  return j;
}

}  // namespace mla
