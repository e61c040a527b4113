// Private to the prefill kind: one (implementation, case) row, stored or drawn, and the cases
// drawn at run time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/prefill_kernel.hpp"
#include "run/session.hpp"

namespace mla::certify {

// An external kernel's prefill entry (a plug-in's, ABI 1.4, or a Python kernel's) as the prefill
// kind sees it: its declared info and the default check() and cost(). Its calls are made in
// child processes by prefill_row, never through prepare() (which throws).
std::shared_ptr<const PrefillImpl> external_prefill(PrefillKernelInfo info);

// The rows of drawn prefill cases (family fresh) carry this file.
inline constexpr const char* kFreshPrefillFile = "fresh_prefill";

// What a prefill result is judged against, from the C++ oracles at run time: the fp64 truth,
// and the bf16 pipeline (mla::ref::prefill_same_dtype) once a kernel that is not fp64 needs it.
class PrefillReference {
 public:
  explicit PrefillReference(const PrefillInputs& in) : in_(in) {}
  const PrefillOutputs& truth();
  const PrefillOutputs& same_dtype();

 private:
  const PrefillInputs& in_;
  std::optional<PrefillOutputs> truth_, same_;
};

// The row of `k` (a prefill implementation) on `in` (canonical): SKIPPED when unavailable,
// NOT_CLAIMED with its check()'s reason, else its calls in this process (inputs in its declared
// conventions, outputs made canonical) judged by judge_prefill.
reports::CaseResult prefill_row(Session& s, const Implementation& k, const CaseRef& ref, const std::string& description,
                                const PrefillInputs& in, PrefillReference& reference);

// A prefill case drawn from a seed inside an implementation's claims.
struct DrawnPrefill {
  std::string name, description;
  PrefillBuffers inputs;
};
// prefill/fresh.cpp: varlen lengths 0, 1, 63, 64, 65; a chunk with fewer queries than keys; a
// non-causal context chunk with a sequence of no key; q with a large std. Odd head counts inside
// [min_heads, max_heads]; the kinds of call it does not claim are left out. `long_cases`
// (--long): also a varlen batch of 16K+ tokens and a chunk over a prefix of 32K+ keys.
std::vector<DrawnPrefill> draw_prefill_cases(uint64_t seed, const PrefillCapabilities& caps, bool long_cases);

// prefill/fresh.cpp: the drawn cases of `k`, run and judged like the stored ones.
void certify_fresh_prefill(Session& s, const Implementation& k, uint64_t seed);

}  // namespace mla::certify
