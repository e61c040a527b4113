// Private to the sparse_prefill kind: what the rest of the certifier needs of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mla/core/indexer_logits.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "kinds/stored_kind.hpp"
#include "run/session.hpp"

namespace mla::certify {

// The rows of drawn sparse prefill calls (family fresh) carry this file.
inline constexpr const char* kFreshSparsePrefillFile = "fresh_sparse_prefill";

// An external kernel's sparse prefill entry (a plug-in's, ABI 1.5, or a Python kernel's) as the
// kind sees it: its declared info and the default check() and cost(). Its calls are made in child
// processes, never through prepare() (which throws).
std::shared_ptr<const SparsePrefillImpl> external_sparse_prefill(SparsePrefillKernelInfo info);

// The row `r` of a sparse prefill run on `in` (canonical, the kernel's too): the run's status,
// then judge_sparse_prefill against the fp64 oracle with the bf16 (or float32) pipeline as the
// ratio rule's reference, its three comparisons in the row. For the drawn calls and the chain.
void judge_sparse_prefill_run(reports::CaseResult& r, const SparsePrefillImpl& impl, const SparsePrefillInputs& in,
                              const InProcessRun<SparsePrefillOutputs>& run);

// A chain case (chain.cpp): V3.2's sparse path as deployed, ending in the kernel the case is
// drawn for. The indexer's inputs (ragged, bottom-right causal: row r of s_q sees keys
// [0, s_kv - s_q + r + 1)) and the attention's q and keys; the attention's indices are the top-k
// link's output, filled when the case runs.
struct DrawnChain {
  std::string name;
  IndexerLogitsBuffers indexer;
  SparsePrefillBuffers attention;
};
// Inside `info`'s claims (its first claimed head count, else 16; topk the smallest multiple of its
// claim from 64; d_qk 576 where it takes it): a chunk of 24 rows over 3 x topk keys, and a
// sequence of topk + 16 tokens prefilled from its start (its first rows see fewer keys than topk).
std::vector<DrawnChain> draw_chain_cases(uint64_t seed, const SparsePrefillKernelInfo& info);
// The row of the chain ending in `k` (chain.cpp says which links feed it and how each is judged).
reports::CaseResult chain_row(Session& s, const Implementation& k, const DrawnChain& c);

}  // namespace mla::certify
