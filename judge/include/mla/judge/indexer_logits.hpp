// THE judge of the indexer logits (mla/core/indexer_logits.hpp), with the exact oracle
// (mla/ref/indexer_logits.hpp) as the truth. Per element of [rows, cols]:
//  * outside its row's valid range the logit is -inf, exactly (the mask the top-k reads): a
//    finite value there is a reason naming the row, the position and the range; for a paged
//    next_n 2 call, when every such position is a later query token's own, the reason says the
//    earlier token sees the later one's position;
//  * inside it the logit is finite and |got - truth| <= max(atol, atol_rel_max * B), the table
//    entry indexer.logits.f32, B the element's magnitude (k_scale * sum_h |w_h| * sum_d |q k|,
//    what a float32 kernel's roundings scale with: the logit itself can cancel to 0 while they
//    do not);
//  * DeepGEMM's own test metric over the valid elements, 1 - 2 sum(xy) / sum(x^2 + y^2), within
//    the entry's cos_diff (its 1e-3), reported beside the element rule.
// A failed element's reason names its row (paged: sequence and query token), position, truth,
// got and bound. When one known bug explains every wrong valid element, a reason names it: k_scale
// applied twice, the relu left out, the scale read from right after each token's codes (the
// 132-byte record layout, not the cache's: a block's codes first, then its scales).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mla/core/indexer_logits.hpp"
#include "mla/core/tolerance.hpp"

namespace mla {

const tol::Tolerance& indexer_logits_tolerance();  // the entry indexer.logits.f32

struct IndexerLogitsJudgement {
  tol::Verdict verdict = tol::Verdict::error;  // pass or fail
  std::vector<std::string> reasons;
  int64_t masked_written = 0;    // finite (or NaN, +inf) outside a row's range
  int64_t valid_not_finite = 0;  // -inf, +inf or NaN inside it
  int64_t elements_failed = 0;   // finite inside the range but outside the bound
  double max_abs_err = 0;        // over the valid elements
  // max |got - truth| / bound over the valid finite elements: below 1 each passes, and how far
  // below is the headroom (the tolerance entry's witness).
  double max_bound_use = 0;
  double cos_diff = 0;  // DeepGEMM's metric over the valid finite elements
};

// `got` the kernel's logits [rows, cols]. Throws mla::Error when `in` is malformed (the caller's
// bug: validate_indexer_logits_inputs's reasons); a wrong-sized `got` is a FAIL.
IndexerLogitsJudgement judge_indexer_logits(const IndexerLogitsInputs& in, std::span<const float> got);

}  // namespace mla
