#include "mla/judge/indexer_logits.hpp"

#include <algorithm>
#include <cmath>
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
  int64_t later_token = 0;       // masked_written of them at a later query token's position
  int64_t scaled_twice = 0;      // elements_failed of them equal to truth * k_scale within bound
  std::string first_masked, first_invalid, first_failed;
};

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
      const double scale = indexer_logits_key(in, r, p).scale;
      if (std::fabs(g - want * scale) <= bound * scale) ++c.scaled_twice;
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
    if (c.scaled_twice == j.elements_failed) {
      j.reasons.push_back("values: every wrong logit is the truth times its key's scale: k_scale is applied twice");
    }
  }
  if (j.cos_diff > t.cos_diff) {
    j.reasons.push_back(fmt::format("values: 1 - 2 sum(xy) / sum(x^2 + y^2) = {:.3g} over the valid logits exceeds {:.3g}",
                                    j.cos_diff, t.cos_diff));
  }
  j.verdict = j.reasons.empty() ? Verdict::pass : Verdict::fail;
  return j;
}

}  // namespace mla
