// A prefill or merge implementation called as the host calls one (inputs in the kernel's
// declared conventions, its outputs made canonical: the inputs_to_kernel and
// outputs_to_canonical of mla/core/prefill.hpp and mla/core/merge.hpp) and
// judged against a stored case by the one judge with that case's truth: what every test over the
// prefill and merge goldens does, declared once.
#pragma once

#include <vector>

#include "mla/core/merge.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/merge.hpp"
#include "mla/judge/prefill.hpp"

namespace mla::testing {

// prepare, run, synchronize and results of `k` on the canonical inputs crossed into its
// conventions (the storages hold what inputs_to_kernel converted), the results made canonical.
template <class Impl, class Inputs, class... Storage>
auto call_canonical(const Impl& k, const Inputs& canonical, Storage&... storage) {
  const Inputs in = inputs_to_kernel(k.info().conventions, canonical, storage...);
  auto p = k.prepare(in);
  p->run();
  p->synchronize();
  auto o = p->results();
  outputs_to_canonical(k.info().conventions, canonical.shape, o);
  return o;
}

inline PrefillOutputs call_prefill(const PrefillImpl& k, const PrefillInputs& canonical) {
  std::vector<uint16_t> v;
  return call_canonical(k, canonical, v);
}

// judge_prefill of `got` against the case's fp64 truth, the stored bf16 pipeline arming the
// error-ratio rule for a result that is not fp64.
inline AttentionJudgement judge_prefill_case(const PrefillKernelInfo& k, const golden::PrefillCase& c,
                                             const PrefillOutputs& got) {
  std::vector<double> so(c.same_dtype_out.size());
  for (std::size_t i = 0; i < so.size(); ++i) so[i] = bf16_to_float(c.same_dtype_out[i]);
  const std::vector<double> sl(c.same_dtype_lse.begin(), c.same_dtype_lse.end());
  return judge_prefill(c.shape, {k.out_dtype, k.compute}, got, {c.truth_out, c.truth_lse, so, sl});
}

inline MergeOutputs call_merge(const MergeImpl& k, const MergeInputs& canonical) {
  std::vector<float> lse_a, lse_b;
  return call_canonical(k, canonical, lse_a, lse_b);
}

}  // namespace mla::testing
