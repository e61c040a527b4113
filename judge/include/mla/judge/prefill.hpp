// THE judge of a prefill result (mla/core/prefill.hpp): the certifier and every test that holds a
// prefill implementation to the truth call this, as judge_attention for decode.
//
// What it decides, from the one tolerance table (the prefill.* entries, whose reasons say where
// their numbers come from): the output dtype produced must be the one declared; out and lse each
// pass every rule of the entry for the implementation's precision class; when a deployed-precision
// reference is given and the result is not fp64, the error-ratio rule is armed with it.
#pragma once

#include <span>
#include <string_view>

#include "mla/core/prefill.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/judge/attention.hpp"

namespace mla {

// What a prefill result is compared with; out [total_q, h, 128], lse [h, total_q] canonical.
struct PrefillTruth {
  std::span<const double> out, lse;                         // the fp64 truth
  std::span<const double> same_dtype_out, same_dtype_lse;  // the bf16 pipeline; both or neither
};

// The table entry for a prefill result of precision class `c`; `what` is "out" or "lse". Throws
// mla::Error for a class the suite cannot judge.
const tol::Tolerance& prefill_tolerance(const PrecisionClass& c, std::string_view what);

// Never throws on bad numbers (they are reasons); throws mla::Error when the truth or a reference
// does not have the shape's size (a caller's bug).
AttentionJudgement judge_prefill(const PrefillShape& shape, const Declaration& declared, const PrefillOutputs& got,
                                 const PrefillTruth& truth);

}  // namespace mla
