// Private to mla_certify: how each kind's external entry is called, declared once for the
// certifier (run_entry_in_child, where every call is audited) and the benchmark (a Python kernel's
// long-lived bench child, certify/src/bench/python_bench.cpp): the call's named input buffers and
// its own output buffers, the scalars the child reads for that entry (kernels/python/mla_door/
// child.py, and `mla __child call` for a plug-in), and how call 1's output buffers become the
// kind's outputs. Inputs are in the entry's declared conventions and its outputs stay in them:
// the caller crosses the one boundary (inputs_to_kernel, outputs_to_canonical).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "isolation/entry_calls.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"

namespace mla::certify {

template <class Outputs>
struct EntryPlan {
  // The buffers' spans point into the inputs the plan was made of: keep those alive while it is used.
  EntryCalls calls;
  std::function<Outputs(const std::vector<std::vector<uint8_t>>&)> outputs;  // of call 1's per-call buffers
};

// out [total_q, h, d_v] in the entry's out dtype, lse float32 in its layout.
EntryPlan<PrefillOutputs> prefill_entry_plan(const PrefillKernelInfo& info, const PrefillInputs& kin);
// out [n, h, d] in the state dtype, lse float32 in the entry's layout.
EntryPlan<MergeOutputs> merge_entry_plan(const MergeInputs& kin);
// indices [rows, k] in the entry's index base; an unsorted entry's rows compared as sets.
EntryPlan<TopkOutputs> topk_entry_plan(const TopkKernelInfo& info, const TopkInputs& in);
// logits [rows, cols] float32; only the call's layout's arrays are laid out.
EntryPlan<std::vector<float>> indexer_logits_entry_plan(const IndexerLogitsInputs& in);
// out [s_q, h, 512] in the entry's out dtype, max_logits and lse [s_q, h] float32.
EntryPlan<SparsePrefillOutputs> sparse_prefill_entry_plan(const SparsePrefillKernelInfo& info, const SparsePrefillInputs& in);

// What an entry's own can_implement (ABI 1.6, or a Python kernel's) is asked before its call on
// these inputs (in the entry's conventions): the call's scalars as its plan gives them to the
// child, with the lengths (the prefill's cu_seqlens, the sparse prefill's topk_length values);
// never its data.
ClaimQuestion prefill_claim_question(const PrefillInputs& kin);
ClaimQuestion merge_claim_question(const MergeInputs& kin);
ClaimQuestion sparse_prefill_claim_question(const SparsePrefillInputs& in);
ClaimQuestion topk_claim_question(const TopkInputs& in);                  // with starts and ends
ClaimQuestion indexer_logits_claim_question(const IndexerLogitsInputs& in);  // context_lens, or ks and ke
ClaimQuestion indexer_append_claim_question(const IndexerAppendShape& shape);
// The same question by the inputs' type (the benchmarks' entry wrappers are templates over it).
inline ClaimQuestion claim_question(const PrefillInputs& kin) { return prefill_claim_question(kin); }
inline ClaimQuestion claim_question(const MergeInputs& kin) { return merge_claim_question(kin); }
inline ClaimQuestion claim_question(const TopkInputs& in) { return topk_claim_question(in); }
inline ClaimQuestion claim_question(const IndexerLogitsInputs& in) { return indexer_logits_claim_question(in); }
inline ClaimQuestion claim_question(const SparsePrefillInputs& in) { return sparse_prefill_claim_question(in); }
// The scalars the indexer append's child reads (its plan is laid out by its kind).
nlohmann::json indexer_append_args(const IndexerAppendShape& shape);

}  // namespace mla::certify
