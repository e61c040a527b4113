#include "mla/judge/merge.hpp"

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

const tol::Tolerance& merge_tolerance(StateDType d, std::string_view what) {
  if (what == "lse") return tol::lookup("merge.lse.f32");
  if (what != "out") throw Error(fmt::format("merge_tolerance: unknown result '{}' (expected \"out\" or \"lse\")", what));
  return tol::lookup(fmt::format("merge.out.{}", to_string(d)));
}

AttentionJudgement judge_merge(const MergeShape& s, const MergeOutputs& got, const MergeTruth& truth) {
  AttentionJudgement j;
  if (got.dtype != s.dtype) {
    j.reasons.push_back(fmt::format("the states are {} but the merged out is {}", to_string(s.dtype), to_string(got.dtype)));
  }
  j.out = tol::judge("out", got.out, truth.out, out_shape(s), merge_tolerance(s.dtype, "out"));
  j.lse = tol::judge("lse", got.lse, truth.lse, lse_shape(s), merge_tolerance(s.dtype, "lse"));
  for (const auto& why : j.out.reasons) j.reasons.push_back(tol::row_reason(j.out, why));
  for (const auto& why : j.lse.reasons) j.reasons.push_back(tol::row_reason(j.lse, why));
  return j;
}

}  // namespace mla
