// THE judge of a top-k selection (mla/core/topk.hpp), for the certifier and every test. The
// truth is the float32 logits the kernel was given: a top-k is a selection, so the judge compares
// the given values of what was selected and what was excluded, and needs no oracle arithmetic.
//
// On canonical indices (absolute, topk_outputs_to_canonical applied), per row:
//  * every entry other than -1 is a column inside the row's range [start, end) whose logit is
//    finite (a masked -inf position is never a selection), and no column appears twice;
//  * the number of such entries is exactly min(k, the row's valid positions), and the -1 entries
//    all come after them (trailing padding, sorted or not: a consumer that reads a prefix of the
//    row, FlashMLA's topk_length, relies on it, and leaving the order of the selection free is
//    all an unsorted kernel needs);
//  * set dominance: every selected logit >= every excluded valid logit - tol, tol from the table
//    entry of the kernel's declared logits precision (topk.dominance.<precision>) and the row's
//    largest |valid logit|. Exact ties, and near-ties within tol, never fail a kernel that breaks
//    them its own way; dropping a member that beats an excluded position by more than tol fails;
//  * a kernel that declares its selection sorted gives it by descending logit, within the same tol.
// Every failure is a reason naming the row, the index and the values.
#pragma once

#include <string>
#include <vector>

#include "mla/core/tolerance.hpp"
#include "mla/core/topk.hpp"

namespace mla {

const tol::Tolerance& topk_tolerance(LogitsPrecision p);

struct TopkJudgement {
  // Every failed rule, the first reasons of each kind in row order (reasons beyond a cap are
  // counted in the last line). Empty: PASS.
  std::vector<std::string> reasons;
  int64_t rows_failed = 0;
  // The largest (best excluded - worst selected) over rows, in units of the row's tol: 0 when the
  // selection is exact, <= 1 where it passes, the witness's headroom measure.
  double max_bound_use = 0;
  bool pass() const { return reasons.empty(); }
};

// `in` the canonical inputs (validated: throws mla::Error when they are malformed); `got` the
// kernel's indices made canonical; `sorted` what the kernel declared. A wrong number of indices
// is a reason, not an exception.
TopkJudgement judge_topk(const TopkInputs& in, const TopkOutputs& got, LogitsPrecision precision, bool sorted);

}  // namespace mla
