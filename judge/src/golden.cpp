#include "mla/judge/golden.hpp"

#include "mla/core/numeric.hpp"

namespace mla {

GoldenTruth::GoldenTruth(const golden::AttnCase& c) : c_(c) {
  same_out_.reserve(c.same_dtype_out.size());
  for (uint16_t b : c.same_dtype_out) same_out_.push_back(static_cast<double>(bf16_to_float(b)));
  same_lse_.assign(c.same_dtype_lse.begin(), c.same_dtype_lse.end());
}

AttentionTruth GoldenTruth::view() const {
  AttentionTruth t;
  t.out = c_.truth_out;
  t.lse = c_.truth_lse;
  t.same_dtype_out = same_out_;
  t.same_dtype_lse = same_lse_;
  t.unquantized_out = c_.unquantized_out;
  t.unquantized_lse = c_.unquantized_lse;
  return t;
}

}  // namespace mla
