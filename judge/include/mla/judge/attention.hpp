// THE judge of an attention-core result: the certifier and every test that holds an
// implementation to the truth call this, so a kernel cannot pass a test and fail its
// certificate (or the other way round).
//
// What it decides, from the one tolerance table (mla/core/tolerance.hpp):
//  * the output dtype the implementation produced must be the one it declared;
//  * out and lse each pass every rule of the table entry for its precision class (the operands
//    and accumulation it declared, or the ones its output dtype implies when it declared none,
//    with the produced dtype as output) and the cache format; when a deployed-precision reference is given and the result is not fp64, the
//    error-ratio rule is armed with it for both (an fp64 implementation is held to the truth
//    alone: the bf16 reference is far coarser than it, so a ratio against it bounds nothing);
//  * for an FP8 cache, the distance to the result on the unquantized cache is recorded apart
//    (information only, never part of the verdict: docs/field.md, "Bugs", 7).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mla/core/attention.hpp"
#include "mla/core/precision.hpp"
#include "mla/core/tolerance.hpp"

namespace mla {

// What the implementation declared about its results. The tolerance entries follow from it
// and from what it produced.
struct Declaration {
  OutDType out_dtype = OutDType::f64;
  // Operands and accumulation (KernelInfo::compute); nullopt: undeclared, the class out_dtype
  // implies (every 1.x plug-in and every kernel that predates precision classes).
  std::optional<ComputePrecision> compute = std::nullopt;
};

// What a result is compared with; the spans have the shapes out_shape() / lse_shape().
struct AttentionTruth {
  std::span<const double> out, lse;  // the fp64 truth
  // The deployed-precision reference (mla/ref/same_dtype.hpp or a golden's same_dtype/*); both
  // or neither.
  std::span<const double> same_dtype_out, same_dtype_lse;
  // FP8 cases: the fp64 result on the unquantized cache; both or neither.
  std::span<const double> unquantized_out, unquantized_lse;
};

struct AttentionJudgement {
  tol::Comparison out, lse;
  std::optional<tol::Comparison> out_vs_unquantized, lse_vs_unquantized;
  // Every failed rule, in this order: a dtype that is not the declared one, "out: ...",
  // "lse: ...". Empty: PASS.
  std::vector<std::string> reasons;
  bool pass() const { return reasons.empty(); }
};

// THE choice of the table entry a result is judged with: by the implementation's precision class
// (mla/core/tolerance.hpp, tolerance_for, lists the classes and their entries); `what` is "out"
// or "lse". Throws mla::Error for a class the suite cannot judge.
const tol::Tolerance& attention_tolerance(const PrecisionClass& c, CacheFormat format, std::string_view what);
// An implementation that declared nothing: the class of the dtype it produced.
const tol::Tolerance& attention_tolerance(OutDType produced, CacheFormat format, std::string_view what);

// Never throws on bad numbers (they are reasons); throws mla::Error when the truth or a
// reference does not have the shape's size (a caller's bug, not the implementation's).
AttentionJudgement judge_attention(const AttnShape& shape, const Declaration& declared, const AttnOutputs& got,
                                   const AttentionTruth& truth);

}  // namespace mla
