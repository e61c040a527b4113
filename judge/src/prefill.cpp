#include "mla/judge/prefill.hpp"

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

const tol::Tolerance& prefill_tolerance(const PrecisionClass& c, std::string_view what) {
  return tol::prefill_tolerance_for(c, what);
}

AttentionJudgement judge_prefill(const PrefillShape& s, const Declaration& declared, const PrefillOutputs& got,
                                 const PrefillTruth& truth) {
  if (truth.same_dtype_out.empty() != truth.same_dtype_lse.empty()) {
    throw Error("judge_prefill: a deployed-precision reference needs both out and lse");
  }
  AttentionJudgement j;
  if (got.dtype != declared.out_dtype) {
    j.reasons.push_back(
        fmt::format("declared output {} but produced {}", to_string(declared.out_dtype), to_string(got.dtype)));
  }
  const auto os = out_shape(s), ls = lse_shape(s);
  const bool with_ref = got.dtype != OutDType::f64 && !truth.same_dtype_out.empty();
  auto ref = [&](std::span<const double> v) { return with_ref ? std::optional<std::span<const double>>(v) : std::nullopt; };
  const PrecisionClass cls = precision_class(declared.compute, got.dtype);
  j.out = tol::judge("out", got.out, truth.out, os, prefill_tolerance(cls, "out"), ref(truth.same_dtype_out));
  j.lse = tol::judge("lse", got.lse, truth.lse, ls, prefill_tolerance(cls, "lse"), ref(truth.same_dtype_lse));
  for (const auto& why : j.out.reasons) j.reasons.push_back(tol::row_reason(j.out, why));
  for (const auto& why : j.lse.reasons) j.reasons.push_back(tol::row_reason(j.lse, why));
  return j;
}

}  // namespace mla
