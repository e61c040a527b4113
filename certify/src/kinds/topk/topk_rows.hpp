// Private to the top-k kind: the selections drawn at run time (its only cases: the truth of a
// top-k is the logits it is given, so a stored case would add nothing a drawn one lacks, and a
// drawn one cannot be learnt).
#pragma once

#include <memory>
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

// An external kernel's top-k entry (a plug-in's, ABI 1.4, or a Python kernel's) as the top-k
// kind sees it: its declared info and the default check() and cost(). Its calls are made in
// child processes, never through prepare() (which throws).
std::shared_ptr<const TopkImpl> external_topk(TopkKernelInfo info);

// topk/fresh.cpp: per k it claims (none claimed: 2048, V3.2's index_topk, and 64), a case with
// rows longer than k and one whose every row is shorter than k, each holding every edge row of
// the field (fresh.cpp lists them), from `seed`.
std::vector<DrawnTopk> draw_topk_cases(uint64_t seed, const TopkKernelInfo& info);

}  // namespace mla::certify
