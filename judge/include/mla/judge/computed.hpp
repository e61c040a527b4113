// The C++ oracles' truth for inputs no golden file holds: the certifier's fresh cases, the fresh
// twins of stored cases, the case called between a case's calls, and every benchmark point a
// kernel is judged at before it is timed. The fp64 oracle (mla/ref/attention.hpp) and the
// deployed-precision reference the ratio rule needs (mla/ref/same_dtype.hpp).
#pragma once

#include <vector>

#include "mla/core/attention.hpp"
#include "mla/judge/attention.hpp"

namespace mla {

struct ComputedTruth {
  std::vector<double> out, lse, same_out, same_lse;
  AttentionTruth view() const;
};
ComputedTruth compute_truth(const AttnInputs& in);

}  // namespace mla
