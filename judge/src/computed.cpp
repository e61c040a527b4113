#include "mla/judge/computed.hpp"

#include "mla/ref/attention.hpp"
#include "mla/ref/same_dtype.hpp"

namespace mla {

AttentionTruth ComputedTruth::view() const {
  AttentionTruth t;
  t.out = out;
  t.lse = lse;
  t.same_dtype_out = same_out;
  t.same_dtype_lse = same_lse;
  return t;
}

ComputedTruth compute_truth(const AttnInputs& in) {
  auto fp64 = ref::attention_fp64(in);
  auto same = ref::attention_same_dtype(in);
  return {std::move(fp64.out), std::move(fp64.lse), std::move(same.out), std::move(same.lse)};
}

}  // namespace mla
