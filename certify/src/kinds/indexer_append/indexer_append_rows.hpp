// Private to the indexer_append kind: its cases, all drawn at run time (its truth is the C++
// oracle's exact bytes, so a stored case would only be one more case to tune to).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mla/core/indexer_cache.hpp"

namespace mla::certify {

// The rows of drawn indexer appends (family fresh) carry this file.
inline constexpr const char* kFreshIndexerAppendFile = "fresh_indexer_append";

struct DrawnIndexerAppend {
  std::string name, description;
  IndexerAppendBuffers inputs;
};

// An external kernel's indexer append entry (a plug-in's, ABI 1.5, or a Python kernel's) as the
// kind sees it: its declared info and the default check() and cost(). Its calls are made in child
// processes, never through prepare() (which throws).
std::shared_ptr<const IndexerAppendImpl> external_indexer_append(IndexerAppendKernelInfo info);

// indexer_append/fresh.cpp: per scale format it claims and per block size (its claimed ones, or
// 64 and 16), one append with the edge keys, skipped tokens, a partial last block and prior
// bytes drawn from `seed`.
std::vector<DrawnIndexerAppend> draw_indexer_append_cases(uint64_t seed, const IndexerAppendKernelInfo& info);

}  // namespace mla::certify
