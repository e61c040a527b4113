// THE judge of a merge of attention states (mla/core/merge.hpp), for the certifier and every
// test: the merged out must be of the state dtype and pass the merge.out.<dtype> entry, the lse
// the merge.lse.f32 entry, against the fp64 truth (an empty row's -inf must match exactly, as
// every infinity and NaN position must).
#pragma once

#include <span>

#include "mla/core/merge.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/judge/attention.hpp"

namespace mla {

struct MergeTruth {
  std::span<const double> out, lse;  // [n, h, d], [h, n], canonical
};

const tol::Tolerance& merge_tolerance(StateDType d, std::string_view what);

// Never throws on bad numbers (they are reasons); throws mla::Error when the truth does not have
// the shape's size.
AttentionJudgement judge_merge(const MergeShape& shape, const MergeOutputs& got, const MergeTruth& truth);

}  // namespace mla
