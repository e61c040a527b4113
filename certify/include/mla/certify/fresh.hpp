// The `fresh` family's cases (certify/src/kinds/fresh.cpp), as the certifier draws them: exposed so a
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

// One case of the fresh family before the kernel is asked: what it is for, and its candidates,
// the drawn one first, then the same case moved into the field's domains (heads 64/128, top-k
// multiples of 64, non-causal sparse, 64-token pages, the other cache format); the certifier
// runs the first candidate the kernel claims (capabilities, lengths and its own can_implement),
// so a kernel that claims only its real domain still gets every kind of case it claims. Each
// candidate is ready for axes::build_inputs: paging derived, `needles` set on every case with a
// sequence of needles::kLongTokens or more on a bf16 cache (where the rule can place them), and
// `why` saying what the case is for, its needles included.
struct FreshSlot {
  std::string what;
  std::vector<axes::AxisPoint> candidates;
};
std::vector<FreshSlot> fresh_slots(const Capabilities& caps, uint64_t seed);

// Of each slot, the first candidate inside `caps` (lengths included), names unique, in name
// order (the order `mla merge` restores): what a kernel without can_implement runs.
std::vector<axes::AxisPoint> fresh_points(const Capabilities& caps, uint64_t seed);

}  // namespace mla::certify
