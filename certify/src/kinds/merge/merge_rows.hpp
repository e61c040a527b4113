// Private to the merge kind: one (implementation, case) row, stored or drawn, and the cases
// drawn at run time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mla/core/merge.hpp"
#include "mla/ref/prefill.hpp"
#include "run/session.hpp"

namespace mla::certify {

// An external kernel's merge entry (a plug-in's, ABI 1.4, or a Python kernel's) as the merge kind
// sees it: its declared info and the default check() and cost(). Its calls are made in child
// processes by merge_row, never through prepare() (which throws).
std::shared_ptr<const MergeImpl> external_merge(MergeKernelInfo info);

// The rows of drawn merge cases (family fresh) carry this file.
inline constexpr const char* kFreshMergeFile = "fresh_merge";

// The fp64 truth of a merge of `in` (mla::ref::merge_states on its values, widened exactly).
ref::MergeResult merge_truth(const MergeInputs& in);

// The row of `k` (a merge implementation) on `in` (canonical): SKIPPED when unavailable,
// NOT_CLAIMED with its check()'s reason, else its calls in this process (lse in its declared
// base and layout, outputs made canonical) judged by judge_merge against `truth`.
reports::CaseResult merge_row(Session& s, const Implementation& k, const CaseRef& ref, const std::string& description,
                              const MergeInputs& in, const ref::MergeResult& truth);

// A merge drawn from a seed inside an implementation's claims.
struct DrawnMerge {
  std::string name, description;
  MergeBuffers inputs;
};
// merge/fresh.cpp: per state dtype it claims: either side empty as +inf and as -inf (with NaN in
// that side's out), both empty, lse 1000 apart around 500, and finite states.
std::vector<DrawnMerge> draw_merge_cases(uint64_t seed, const MergeKernelInfo& info);

// merge/fresh.cpp: the drawn cases of `k`, run and judged like the stored ones.
void certify_fresh_merge(Session& s, const Implementation& k, uint64_t seed);

}  // namespace mla::certify
