#include "mla/judge/sparse_prefill.hpp"

#include <fmt/format.h>

namespace mla {

SparsePrefillJudgement judge_sparse_prefill(const SparsePrefillShape& s, const Declaration& declared,
                                            const SparsePrefillOutputs& got, const SparsePrefillOutputs& truth,
                                            const SparsePrefillOutputs* same_dtype) {
  SparsePrefillJudgement j;
  if (got.dtype != declared.out_dtype) {
    j.reasons.push_back(
        fmt::format("declared output {} but produced {}", to_string(declared.out_dtype), to_string(got.dtype)));
  }
  const std::vector<int64_t> os{s.s_q, s.heads, kSparsePrefillDv}, rs{s.s_q, s.heads};
  const bool with_ref = got.dtype != OutDType::f64 && same_dtype != nullptr;
  auto ref = [&](const std::vector<double>& v) {
    return with_ref ? std::optional<std::span<const double>>(v) : std::nullopt;
  };
  const PrecisionClass cls = precision_class(declared.compute, got.dtype);
  j.out = tol::judge("out", got.out, truth.out, os, attention_tolerance(cls, CacheFormat::bf16, "out"),
                     with_ref ? ref(same_dtype->out) : std::nullopt);
  j.lse = tol::judge("lse", got.lse, truth.lse, rs, attention_tolerance(cls, CacheFormat::bf16, "lse"),
                     with_ref ? ref(same_dtype->lse) : std::nullopt);
  j.max_logits = tol::judge("max_logits", got.max_logits, truth.max_logits, rs,
                            // float32 wherever the result is not float64 (the C ABI and FlashMLA
                            // write max_logits as float32 whatever they compute in).
                            tol::lookup(cls.output == OutDType::f64 ? "sparse_prefill.max_logits.f64"
                                                                    : "sparse_prefill.max_logits.f32"));
  for (const auto* c : {&j.out, &j.lse, &j.max_logits}) {
    for (const auto& why : c->reasons) j.reasons.push_back(tol::row_reason(*c, why));
  }
  return j;
}

}  // namespace mla
