// Each kind's external entry call, laid out once (entry_plans.hpp).
#include "kinds/entry_plans.hpp"

#include <algorithm>
#include <cstring>

#include "isolation/arena.hpp"
#include "kinds/stored_kind.hpp"
#include "mla/certify/protocol.hpp"

namespace mla::certify {
namespace {

// An output region of `bytes`: empty outputs (no row) still get one, the child is told one per call.
ArenaBuffer output(const char* name, std::size_t elem, std::size_t bytes) {
  return {name, {}, false, elem, std::max<std::size_t>(bytes, 1)};
}

// The scalars each entry's child reads (child.cpp, mla_door/child.py), for its calls and its
// can_implement alike.
nlohmann::json prefill_args(const PrefillInputs& kin) {
  return {{"shape", to_json(kin.shape)}, {"softmax_scale", kin.softmax_scale}};
}
nlohmann::json merge_args(const MergeShape& sh) {
  return {{"tokens", sh.tokens}, {"heads", sh.heads}, {"head_dim", sh.head_dim}, {"dtype", to_string(sh.dtype)}};
}
nlohmann::json sparse_prefill_args(const SparsePrefillInputs& in) {
  const auto& sh = in.shape;
  return {{"shape",
           {{"s_q", sh.s_q}, {"s_kv", sh.s_kv}, {"heads", sh.heads}, {"d_qk", sh.d_qk}, {"topk", sh.topk},
            {"sink", sh.sink}, {"topk_length", sh.topk_length}}},
          {"sm_scale", in.sm_scale}};
}

nlohmann::json topk_args(const TopkShape& s) { return {{"rows", s.rows}, {"n", s.n}, {"k", s.k}}; }
nlohmann::json indexer_logits_args(const IndexerLogitsShape& s) { return {{"shape", to_json(s)}}; }

template <class T>
std::vector<T> values(std::span<const T> v) {
  return {v.begin(), v.end()};
}

ClaimQuestion entry_question(const char* entry, nlohmann::json call) {
  ClaimQuestion q;
  q.entry = entry;
  q.call = std::move(call);
  return q;
}

}  // namespace

ClaimQuestion prefill_claim_question(const PrefillInputs& kin) {
  auto call = prefill_args(kin);
  call["cu_seqlens_q"] = values(kin.cu_seqlens_q);
  call["cu_seqlens_k"] = values(kin.cu_seqlens_k);
  return entry_question(kEntryPrefill, std::move(call));
}

ClaimQuestion merge_claim_question(const MergeInputs& kin) { return entry_question(kEntryMerge, merge_args(kin.shape)); }

ClaimQuestion sparse_prefill_claim_question(const SparsePrefillInputs& in) {
  auto call = sparse_prefill_args(in);
  if (in.shape.topk_length) call["topk_length_values"] = values(in.topk_length);
  return entry_question(kEntrySparsePrefill, std::move(call));
}

nlohmann::json indexer_append_args(const IndexerAppendShape& shape) {
  return {{"num_tokens", shape.num_tokens},
          {"num_blocks", shape.num_blocks},
          {"block_size", shape.block_size},
          {"scale_fmt", to_string(shape.scale_fmt)}};
}

ClaimQuestion topk_claim_question(const TopkInputs& in) {
  auto call = topk_args(in.shape);
  call["starts"] = values(in.starts);
  call["ends"] = values(in.ends);
  return entry_question(kEntryTopk, std::move(call));
}

ClaimQuestion indexer_logits_claim_question(const IndexerLogitsInputs& in) {
  auto call = indexer_logits_args(in.shape);
  if (in.shape.layout == IndexerLogitsLayout::paged) {
    call["context_lens"] = values(in.context_lens);
  } else {
    call["ks"] = values(in.ks);
    call["ke"] = values(in.ke);
  }
  return entry_question(kEntryIndexerLogits, std::move(call));
}

ClaimQuestion indexer_append_claim_question(const IndexerAppendShape& shape) {
  return entry_question(kEntryIndexerAppend, indexer_append_args(shape));
}

EntryPlan<PrefillOutputs> prefill_entry_plan(const PrefillKernelInfo& info, const PrefillInputs& kin) {
  const auto& sh = kin.shape;
  const OutDType dtype = info.out_dtype;
  const std::size_t vb = dtype == OutDType::bf16 ? 2 : 4;
  const auto n_out = static_cast<std::size_t>(sh.total_q) * static_cast<std::size_t>(sh.heads) * static_cast<std::size_t>(sh.d_v);
  const auto n_lse = static_cast<std::size_t>(sh.total_q) * static_cast<std::size_t>(sh.heads);
  EntryPlan<PrefillOutputs> p;
  p.calls.entry = kEntryPrefill;
  p.calls.inputs = {{"q", raw_bytes(kin.q), false, 2},
                    {"k", raw_bytes(kin.k), false, 2},
                    {"v", raw_bytes(kin.v), false, 2},
                    {"cu_seqlens_q", raw_bytes(kin.cu_seqlens_q), false, 4},
                    {"cu_seqlens_k", raw_bytes(kin.cu_seqlens_k), false, 4}};
  p.calls.per_call = {output("out", vb, n_out * vb), output("lse", 4, n_lse * 4)};
  p.calls.args = prefill_args(kin);
  p.outputs = [dtype, vb, n_out, n_lse](const std::vector<std::vector<uint8_t>>& b) {
    PrefillOutputs o;
    o.dtype = dtype;
    o.out = widen_values({b[0].data(), n_out * vb}, static_cast<int>(vb));
    o.lse = widen_values({b[1].data(), n_lse * 4}, 4);
    return o;
  };
  return p;
}

EntryPlan<MergeOutputs> merge_entry_plan(const MergeInputs& kin) {
  const auto& sh = kin.shape;
  const StateDType dtype = sh.dtype;
  const std::size_t vb = bytes_per_value(dtype);
  const auto n_out = static_cast<std::size_t>(sh.tokens) * static_cast<std::size_t>(sh.heads) * static_cast<std::size_t>(sh.head_dim);
  const auto n_lse = static_cast<std::size_t>(sh.tokens) * static_cast<std::size_t>(sh.heads);
  EntryPlan<MergeOutputs> p;
  p.calls.entry = kEntryMerge;
  p.calls.inputs = {{"out_a", kin.out_a, false, vb},
                    {"lse_a", raw_bytes(kin.lse_a), false, 4},
                    {"out_b", kin.out_b, false, vb},
                    {"lse_b", raw_bytes(kin.lse_b), false, 4}};
  p.calls.per_call = {output("out", vb, n_out * vb), output("lse", 4, n_lse * 4)};
  p.calls.args = merge_args(sh);
  p.outputs = [dtype, n_out, n_lse](const std::vector<std::vector<uint8_t>>& b) {
    MergeOutputs o;
    o.dtype = dtype;
    o.out.resize(n_out);
    for (std::size_t i = 0; i < n_out; ++i) o.out[i] = state_value(dtype, b[0], i);
    o.lse = widen_values({b[1].data(), n_lse * 4}, 4);
    return o;
  };
  return p;
}

EntryPlan<TopkOutputs> topk_entry_plan(const TopkKernelInfo& info, const TopkInputs& in) {
  const auto n_idx = static_cast<std::size_t>(in.shape.rows) * static_cast<std::size_t>(in.shape.k);
  EntryPlan<TopkOutputs> p;
  p.calls.entry = kEntryTopk;
  p.calls.inputs = {{"logits", raw_bytes(in.logits), false, 4},
                    {"starts", raw_bytes(in.starts), false, 4},
                    {"ends", raw_bytes(in.ends), false, 4}};
  p.calls.per_call = {output("indices", 4, n_idx * 4)};
  // An unsorted selection promises no order, and the field's kernels (vLLM's, FlashInfer's without
  // its deterministic mode) may order a row differently on every call: its calls must agree on
  // each row's set, not on its order.
  if (!info.conventions.sorted) p.calls.per_call[0].unordered_row = static_cast<std::size_t>(in.shape.k);
  p.calls.args = topk_args(in.shape);
  p.outputs = [n_idx](const std::vector<std::vector<uint8_t>>& b) {
    TopkOutputs o;
    o.indices = int32_values({b[0].data(), n_idx * 4});
    return o;
  };
  return p;
}

EntryPlan<std::vector<float>> indexer_logits_entry_plan(const IndexerLogitsInputs& in) {
  const auto n = static_cast<std::size_t>(in.shape.rows()) * static_cast<std::size_t>(in.shape.cols());
  EntryPlan<std::vector<float>> p;
  p.calls.entry = kEntryIndexerLogits;
  p.calls.inputs = {{"q", raw_bytes(in.q), false, 1}, {"weights", raw_bytes(in.weights), false, 4}};
  if (in.shape.layout == IndexerLogitsLayout::paged) {
    p.calls.inputs.push_back({"kv_cache", raw_bytes(in.cache), false, 1});
    p.calls.inputs.push_back({"context_lens", raw_bytes(in.context_lens), false, 4});
    p.calls.inputs.push_back({"block_table", raw_bytes(in.block_table), false, 4});
  } else {
    p.calls.inputs.push_back({"k_codes", raw_bytes(in.k_codes), false, 1});
    p.calls.inputs.push_back({"k_scales", raw_bytes(in.k_scales), false, 4});
    p.calls.inputs.push_back({"ks", raw_bytes(in.ks), false, 4});
    p.calls.inputs.push_back({"ke", raw_bytes(in.ke), false, 4});
  }
  p.calls.per_call = {output("logits", 4, n * 4)};
  p.calls.args = indexer_logits_args(in.shape);
  p.outputs = [n](const std::vector<std::vector<uint8_t>>& b) {
    std::vector<float> o(n);
    if (n > 0) std::memcpy(o.data(), b[0].data(), 4 * n);
    return o;
  };
  return p;
}

EntryPlan<SparsePrefillOutputs> sparse_prefill_entry_plan(const SparsePrefillKernelInfo& info,
                                                          const SparsePrefillInputs& in) {
  const auto& sh = in.shape;
  const OutDType dtype = info.out_dtype;
  const std::size_t vb = dtype == OutDType::bf16 ? 2 : 4;
  const auto n_out = static_cast<std::size_t>(sh.s_q * sh.heads * kSparsePrefillDv);
  const auto n_row = static_cast<std::size_t>(sh.s_q * sh.heads);
  EntryPlan<SparsePrefillOutputs> p;
  p.calls.entry = kEntrySparsePrefill;
  p.calls.inputs = {{"q", raw_bytes(in.q), false, 2}, {"kv", raw_bytes(in.kv), false, 2}, {"indices", raw_bytes(in.indices), false, 4}};
  if (sh.sink) p.calls.inputs.push_back({"attn_sink", raw_bytes(in.attn_sink), false, 4});
  if (sh.topk_length) p.calls.inputs.push_back({"topk_length", raw_bytes(in.topk_length), false, 4});
  p.calls.per_call = {output("out", vb, n_out * vb), output("max_logits", 4, n_row * 4), output("lse", 4, n_row * 4)};
  p.calls.args = sparse_prefill_args(in);
  p.outputs = [dtype, vb, n_out, n_row](const std::vector<std::vector<uint8_t>>& b) {
    // max_logits and lse are float32 whatever out's dtype (the ABI writes them so).
    SparsePrefillOutputs o;
    o.dtype = dtype;
    o.out = widen_values({b[0].data(), n_out * vb}, static_cast<int>(vb));
    o.max_logits = widen_values({b[1].data(), n_row * 4}, 4);
    o.lse = widen_values({b[2].data(), n_row * 4}, 4);
    return o;
  };
  return p;
}

}  // namespace mla::certify
