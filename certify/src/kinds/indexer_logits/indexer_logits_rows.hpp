// Private to the indexer_logits kind: its cases, all drawn at run time (the truth is the C++
// oracle's exact scores of the drawn codes, computed at run time).
#pragma once

#include <string>
#include <vector>

#include "mla/core/indexer_logits.hpp"

namespace mla::certify {

// The rows of drawn indexer logits calls (family fresh) carry this file.
inline constexpr const char* kFreshIndexerLogitsFile = "fresh_indexer_logits";

struct DrawnIndexerLogits {
  std::string name, description;
  IndexerLogitsBuffers inputs;
};

// indexer_logits/fresh.cpp: per layout it claims: paged per next_n and block size, ragged once.
std::vector<DrawnIndexerLogits> draw_indexer_logits_cases(uint64_t seed, const IndexerLogitsKernelInfo& info);

}  // namespace mla::certify
