// The `fresh` family's cases (certify/src/fresh.cpp), as the certifier draws them: exposed so a
// test can hold the drawn inputs to what the family promises (needles on long bf16 cases, every
// kind of invalid sparse index, the catalog's sentinel block id) without a certification run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mla/core/kernel.hpp"
#include "mla/workloads/axes.hpp"

namespace mla::certify {

// The seed of one implementation's fresh cases in a run of seed `run_seed`.
uint64_t fresh_seed(uint64_t run_seed, const std::string& implementation);

// The fresh cases drawn from `seed` inside `caps`, in name order (the order `mla merge`
// restores), each ready for axes::build_inputs: causal, paging derived, `needles` set on every
// case with a sequence of needles::kLongTokens or more on a bf16 cache (where the rule can place
// them), and `why` saying what the case is for, its needles included.
std::vector<axes::AxisPoint> fresh_points(const Capabilities& caps, uint64_t seed);

}  // namespace mla::certify
