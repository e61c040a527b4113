#include "mla/judge/attention.hpp"

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

const tol::Tolerance& attention_tolerance(const PrecisionClass& c, CacheFormat format, std::string_view what) {
  return tol::tolerance_for(c, format, what);
}

const tol::Tolerance& attention_tolerance(OutDType produced, CacheFormat format, std::string_view what) {
  return attention_tolerance(implied_precision(produced), format, what);
}

AttentionJudgement judge_attention(const AttnShape& s, const Declaration& declared, const AttnOutputs& got,
                                   const AttentionTruth& truth) {
  if (truth.same_dtype_out.empty() != truth.same_dtype_lse.empty()) {
    throw Error("judge_attention: a deployed-precision reference needs both out and lse");
  }
  if (truth.unquantized_out.empty() != truth.unquantized_lse.empty()) {
    throw Error("judge_attention: an unquantized result needs both out and lse");
  }
  AttentionJudgement j;
  if (got.dtype != declared.out_dtype) {
    j.reasons.push_back(
        fmt::format("declared output {} but produced {}", to_string(declared.out_dtype), to_string(got.dtype)));
  }
  const std::vector<int64_t> os = out_shape(s), ls = lse_shape(s);
  const bool with_ref = got.dtype != OutDType::f64 && !truth.same_dtype_out.empty();
  auto ref = [&](std::span<const double> v) { return with_ref ? std::optional<std::span<const double>>(v) : std::nullopt; };
  // The declared operands and accumulation with the dtype really produced: a wrong dtype is a
  // reason above, and the values are judged for what they are.
  const PrecisionClass cls = precision_class(declared.compute, got.dtype);
  j.out = tol::judge("out", got.out, truth.out, os, attention_tolerance(cls, s.cache_format, "out"),
                     ref(truth.same_dtype_out));
  j.lse = tol::judge("lse", got.lse, truth.lse, ls, attention_tolerance(cls, s.cache_format, "lse"),
                     ref(truth.same_dtype_lse));
  for (const auto& why : j.out.reasons) j.reasons.push_back(tol::row_reason(j.out, why));
  for (const auto& why : j.lse.reasons) j.reasons.push_back(tol::row_reason(j.lse, why));
  if (!truth.unquantized_out.empty()) {
    const auto& info = tol::lookup("attn.fp8_quantization.info");
    j.out_vs_unquantized = tol::judge("out_vs_unquantized", got.out, truth.unquantized_out, os, info);
    j.lse_vs_unquantized = tol::judge("lse_vs_unquantized", got.lse, truth.unquantized_lse, ls, info);
  }
  return j;
}

}  // namespace mla
