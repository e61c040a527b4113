// THE judge of a sparse prefill result (mla/core/sparse_prefill.hpp): the certifier and every test
// that holds a sparse prefill implementation to the truth call this.
//
// What it decides, from the one tolerance table: the output dtype produced must be the one
// declared; out and lse each pass every rule of the decode entry of the implementation's precision
// class on a bf16 cache (attention_tolerance: a sparse prefill is the decode core's arithmetic on
// the same 576/512-wide rows), with the error-ratio rule armed by the deployed-precision reference
// when the result is not fp64; max_logits passes sparse_prefill.max_logits.<f64|f32> (a float32
// logit of bf16 values in every deployed kernel). A row with no key is held to out 0,
// max_logits -inf and lse +inf by the mask rules.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "mla/core/sparse_prefill.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/judge/attention.hpp"

namespace mla {

struct SparsePrefillJudgement {
  tol::Comparison out, lse, max_logits;
  std::vector<std::string> reasons;  // a dtype that is not the declared one, "out: ...", "lse: ...", "max_logits: ..."
  bool pass() const { return reasons.empty(); }
};

// `same_dtype`: the bf16 pipeline (mla/ref/sparse_prefill.hpp), or null. Never throws on bad
// numbers (they are reasons); throws mla::Error when the truth or the reference does not have the
// shape's size (a caller's bug).
SparsePrefillJudgement judge_sparse_prefill(const SparsePrefillShape& shape, const Declaration& declared,
                                            const SparsePrefillOutputs& got, const SparsePrefillOutputs& truth,
                                            const SparsePrefillOutputs* same_dtype);

}  // namespace mla
