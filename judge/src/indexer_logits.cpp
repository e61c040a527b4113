#include "mla/judge/indexer_logits.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "mla/ref/indexer_logits.hpp"

namespace mla {
namespace {

using tol::Verdict;

std::string row_name(const IndexerLogitsInputs& in, int64_t r) {
  const auto range = indexer_logits_range(in, r);
  if (in.shape.layout == IndexerLogitsLayout::ragged) {
    return fmt::format("row {} (range [{}, {}))", r, range.begin, range.end);
  }
  const int64_t b = r / in.shape.next_n, i = r % in.shape.next_n;
  return fmt::format("row {} (sequence {}, query token {} of {}, context {}: sees [0, {}))", r, b, i, in.shape.next_n,
                     in.context_lens[static_cast<std::size_t>(b)], range.end);
}

// A masked position a paged row wrote finite that is a later query token's own position of the
// same step: ctx - next_n + i < p < ctx.
bool later_tokens_position(const IndexerLogitsInputs& in, int64_t r, int64_t p) {
  if (in.shape.layout != IndexerLogitsLayout::paged) return false;
  const int64_t ctx = in.context_lens[static_cast<std::size_t>(r / in.shape.next_n)];
  return p >= indexer_logits_range(in, r).end && p < ctx;
}

struct Counts {
  int64_t later_token = 0;  // masked_written of them at a later query token's position
  std::string first_masked, first_invalid, first_failed;
};

// A valid element the kernel got wrong (outside the bound, or not finite).
struct Wrong {
  int64_t row = 0, p = 0;
  double got = 0;
};

// Whether `got` is `sum * scale` as a float32 kernel would leave it: within the entry's bound of
// the terms' magnitude at that scale, the same infinity where the float32 product overflows, NaN
// for a NaN scale.
bool explains(double got, double sum, double magnitude, double scale, const tol::Tolerance& t) {
  const double want = sum * scale;
  if (std::isnan(got)) return std::isnan(want);  // a NaN scale
  if (std::isinf(got)) return static_cast<float>(want) == got;
  return std::fabs(got - want) <= tol::effective_atol(t, magnitude * std::fabs(scale));
}

// The known bugs that explain every wrong valid element, each a reason: k_scale applied twice,
// the relu left out, the scale read right after each token's codes (a 132-byte record) instead
// of from the block's scale area.
std::vector<std::string> diagnose(const IndexerLogitsInputs& in, const std::vector<Wrong>& wrong,
                                  const tol::Tolerance& t) {
  std::vector<std::string> out;
  if (wrong.empty()) return out;
  int64_t twice = 0, no_relu = 0, after_codes = 0;
  for (const auto& w : wrong) {
    const auto key = indexer_logits_key(in, w.row, w.p);
    const auto with = ref::indexer_logit_sum(in, w.row, key.codes, true);
    twice += explains(w.got, with.sum, with.magnitude, static_cast<double>(key.scale) * key.scale, t);
    const auto without = ref::indexer_logit_sum(in, w.row, key.codes, false);
    no_relu += explains(w.got, without.sum, without.magnitude, key.scale, t);
    const std::size_t at = static_cast<std::size_t>(key.slot * kIndexerTokenBytes + kIndexerHeadDim);
    if (key.slot >= 0 && at + sizeof(float) <= in.cache.size()) {
      float scale;
      std::memcpy(&scale, in.cache.data() + at, sizeof scale);
      after_codes += explains(w.got, with.sum, with.magnitude, scale, t);
    }
  }
  const auto n = static_cast<int64_t>(wrong.size());
  if (twice == n) out.push_back("values: every wrong logit is the truth times its key's scale: k_scale is applied twice");
  if (no_relu == n) {
    out.push_back("values: every wrong logit is the head sum of the dots without relu: the relu is not applied");
  }
  if (after_codes == n) {
    out.push_back(fmt::format("values: every wrong logit uses the 4 bytes right after its key's codes as its scale (a "
                              "slot * {} record); the cache keeps a block's codes first, then all its scales",
                              kIndexerTokenBytes));
  }
  return out;
}

}  // namespace

const tol::Tolerance& indexer_logits_tolerance() { return tol::lookup("indexer.logits.f32"); }

IndexerLogitsJudgement judge_indexer_logits(const IndexerLogitsInputs& in, std::span<const float> got) {
  IndexerLogitsJudgement j;
  const auto truth = ref::indexer_logits_reference(in);
  const auto& s = in.shape;
  const int64_t rows = s.rows(), cols = s.cols();
  if (static_cast<int64_t>(got.size()) != rows * cols) {
    j.verdict = Verdict::fail;
    j.reasons.push_back(fmt::format("the call returned {} logits, expected {} ([rows {}, cols {}], {})", got.size(),
                                    rows * cols, rows, cols, to_string(s.layout)));
    return j;
  }
  const auto& t = indexer_logits_tolerance();
  Counts c;
  std::vector<Wrong> wrong;
  double sxy = 0, sxx = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto range = indexer_logits_range(in, r);
    for (int64_t p = 0; p < cols; ++p) {
      const std::size_t at = static_cast<std::size_t>(r * cols + p);
      const double g = got[at];
      if (p < range.begin || p >= range.end) {
        if (g == -std::numeric_limits<double>::infinity()) continue;
        if (j.masked_written++ == 0) c.first_masked = fmt::format("{} position {}: {:.9g}", row_name(in, r), p, g);
        if (later_tokens_position(in, r, p)) ++c.later_token;
        continue;
      }
      const double want = truth.logits[at];
      if (!std::isfinite(g)) {
        wrong.push_back({r, p, g});
        if (j.valid_not_finite++ == 0) {
          c.first_invalid = fmt::format("{} position {}: expected {:.9g}, got {}", row_name(in, r), p, want, g);
        }
        continue;
      }
      const double err = std::fabs(g - want), bound = tol::effective_atol(t, truth.magnitude[at]);
      j.max_abs_err = std::max(j.max_abs_err, err);
      j.max_bound_use = std::max(j.max_bound_use, err / bound);
      sxy += g * want;
      sxx += g * g + want * want;
      if (err <= bound) continue;
      wrong.push_back({r, p, g});
      if (j.elements_failed++ == 0) {
        c.first_failed = fmt::format("{} position {}: expected {:.9g}, got {:.9g}, |error| {:.3g} > bound {:.3g} "
                                     "(magnitude {:.6g})",
                                     row_name(in, r), p, want, g, err, bound, truth.magnitude[at]);
      }
    }
  }
  j.cos_diff = sxx > 0 ? 1.0 - 2.0 * sxy / sxx : 0.0;
  if (j.masked_written) {
    j.reasons.push_back(fmt::format("mask: {} logit{} outside the row's valid range {} not -inf; first {}",
                                    j.masked_written, j.masked_written == 1 ? "" : "s", j.masked_written == 1 ? "is" : "are",
                                    c.first_masked));
    if (c.later_token == j.masked_written) {
      j.reasons.push_back(fmt::format("mask: every one is a later query token's own position of the step (query token "
                                      "i sees positions <= context - next_n + i): an earlier token sees a later one's "
                                      "position"));
    }
  }
  if (j.valid_not_finite) {
    j.reasons.push_back(fmt::format("mask: {} logit{} inside the row's valid range not finite; first {}",
                                    j.valid_not_finite, j.valid_not_finite == 1 ? "" : "s", c.first_invalid));
  }
  if (j.elements_failed) {
    j.reasons.push_back(fmt::format("values: {} logit{} outside the bound of {} (max(atol, {:.3g} x magnitude)); first {}",
                                    j.elements_failed, j.elements_failed == 1 ? "" : "s", t.name, t.atol_rel_max,
                                    c.first_failed));
  }
  for (auto& r : diagnose(in, wrong, t)) j.reasons.push_back(std::move(r));
  if (j.cos_diff > t.cos_diff) {
    j.reasons.push_back(fmt::format("values: 1 - 2 sum(xy) / sum(x^2 + y^2) = {:.3g} over the valid logits exceeds {:.3g}",
                                    j.cos_diff, t.cos_diff));
  }
  j.verdict = j.reasons.empty() ? Verdict::pass : Verdict::fail;
  return j;
}

}  // namespace mla
