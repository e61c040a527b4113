// Private to the indexer_logits kind: its cases, stored (the indexer family) and drawn at run
// time; the truth of both is the C++ oracle's exact scores of the call's codes, computed at run
// time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mla/core/indexer_logits.hpp"
#include "mla/golden/golden.hpp"

namespace mla::certify {

// The rows of drawn indexer logits calls (family fresh) carry this file.
inline constexpr const char* kFreshIndexerLogitsFile = "fresh_indexer_logits";

struct DrawnIndexerLogits {
  std::string name, description;
  IndexerLogitsBuffers inputs;
};

// An external kernel's indexer logits entry (a plug-in's, ABI 1.5, or a Python kernel's) as the
// kind sees it: its declared info and the default check() and cost(). Its calls are made in child
// processes, never through prepare() (which throws).
std::shared_ptr<const IndexerLogitsImpl> external_indexer_logits(IndexerLogitsKernelInfo info);

// indexer_logits/fresh.cpp: per layout it claims: paged per next_n and block size, ragged once.
std::vector<DrawnIndexerLogits> draw_indexer_logits_cases(uint64_t seed, const IndexerLogitsKernelInfo& info);

// indexer_logits/stored.cpp: a stored indexer case as one call inside the kernel's claims.
// Paged when it takes paged calls (the decode path, and the call with the most to get wrong:
// the block table, the cache's scale area, the speculative token's horizon): each sequence's
// last next_n positions (2 when it takes 2), the keys on a shuffled block pool of its first
// claimed block size (else 64), garbage in every byte and block-table entry no row reads.
// Otherwise ragged: every stored query row (the prompt's and the decode step's), row (sequence q,
// position p) over the keys of sequence q, valid [0, p]. Heads and width are the case's: a
// kernel that does not claim them gets a not-claimed row.
IndexerLogitsBuffers stored_indexer_call(const golden::IndexerCase& c, const IndexerLogitsKernelInfo& info);

}  // namespace mla::certify
