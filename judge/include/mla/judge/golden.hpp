// What a golden attention case gives the judge: its fp64 truth, its deployed-precision
// reference (stored as bf16 out / fp32 lse, widened here) and, for an FP8 cache, the result on
// the unquantized cache. The certifier and the golden tests take a case's truth from here.
#pragma once

#include <vector>

#include "mla/golden/golden.hpp"
#include "mla/judge/attention.hpp"

namespace mla {

class GoldenTruth {
 public:
  // Keeps a reference to `c`, which must outlive this object.
  explicit GoldenTruth(const golden::AttnCase& c);
  AttentionTruth view() const;

 private:
  const golden::AttnCase& c_;
  std::vector<double> same_out_, same_lse_;
};

}  // namespace mla
