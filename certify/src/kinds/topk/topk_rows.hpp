// Private to the top-k kind: the selections drawn at run time (its only cases: the truth of a
// top-k is the logits it is given, so a stored case would add nothing a drawn one lacks, and a
// drawn one cannot be learnt).
#pragma once

#include <string>
#include <vector>

#include "mla/core/topk.hpp"

namespace mla::certify {

// The rows of drawn top-k cases (family fresh) carry this file.
inline constexpr const char* kFreshTopkFile = "fresh_topk";

struct DrawnTopk {
  std::string name, description;
  TopkBuffers inputs;
};

// topk/fresh.cpp: per k it claims (none claimed: 2048, V3.2's index_topk, and 64), a case with
// rows longer than k and one whose every row is shorter than k, each holding every edge row of
// the field (fresh.cpp lists them), from `seed`.
std::vector<DrawnTopk> draw_topk_cases(uint64_t seed, const TopkKernelInfo& info);

}  // namespace mla::certify
