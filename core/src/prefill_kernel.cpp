#include "mla/core/prefill_kernel.hpp"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"

namespace mla {

std::optional<std::string> check_prefill_capabilities(const PrefillCapabilities& caps, const PrefillInputs& in) {
  const auto& s = in.shape;
  std::vector<std::string> why;
  if (s.d_qk != kMhaDqk || s.d_v != kMhaDv) why.push_back(fmt::format("d_qk={} d_v={} not 192/128", s.d_qk, s.d_v));
  if (s.heads < caps.min_heads || s.heads > caps.max_heads) {
    why.push_back(fmt::format("heads={} outside [{}, {}]", s.heads, caps.min_heads, caps.max_heads));
  }
  if (s.causal && !caps.causal) why.push_back("a causal call (it claims context chunks only)");
  if (!s.causal && !caps.non_causal) why.push_back("a non-causal context-chunk call (it claims causal calls only)");
  if (s.total_q > caps.max_total_tokens || s.total_k > caps.max_total_tokens) {
    why.push_back(fmt::format("total_q={} total_k={} above its {} tokens", s.total_q, s.total_k, caps.max_total_tokens));
  }
  if (!caps.varlen && in.cu_seqlens_q.size() > 2 && in.cu_seqlens_q.size() == in.cu_seqlens_k.size()) {
    // Every sequence the same length (queries and keys): a fixed-length batch.
    for (std::size_t i = 1; i + 1 < in.cu_seqlens_q.size(); ++i) {
      const auto q0 = in.cu_seqlens_q[1] - in.cu_seqlens_q[0], k0 = in.cu_seqlens_k[1] - in.cu_seqlens_k[0];
      if (in.cu_seqlens_q[i + 1] - in.cu_seqlens_q[i] != q0 || in.cu_seqlens_k[i + 1] - in.cu_seqlens_k[i] != k0) {
        why.emplace_back("sequences of different lengths (it claims fixed-length batches only)");
        break;
      }
    }
  }
  if (why.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(why, "; "));
}

nlohmann::json to_json(const PrefillCapabilities& c) {
  return {{"min_heads", c.min_heads}, {"max_heads", c.max_heads},   {"causal", c.causal},
          {"non_causal", c.non_causal}, {"varlen", c.varlen}, {"max_total_tokens", c.max_total_tokens}};
}

PrefillCapabilities prefill_capabilities_from_json(const nlohmann::json& j) {
  PrefillCapabilities c;
  std::string field = "capabilities";
  try {
    field = "min_heads";
    c.min_heads = j.at(field).get<int>();
    field = "max_heads";
    c.max_heads = j.at(field).get<int>();
    field = "causal";
    c.causal = j.at(field).get<bool>();
    field = "non_causal";
    c.non_causal = j.at(field).get<bool>();
    field = "varlen";
    c.varlen = j.at(field).get<bool>();
    field = "max_total_tokens";
    c.max_total_tokens = j.at(field).get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("prefill capabilities: field '{}' is missing or malformed: {}", field, e.what()));
  }
  return c;
}

PrecisionClass precision_class(const PrefillKernelInfo& k) { return precision_class(k.compute, k.out_dtype); }

std::optional<std::string> PrefillImpl::check(const PrefillInputs& in) const {
  if (auto why = check_prefill_capabilities(info().caps, in)) return why;
  return prefill_alignment_refusal(info().conventions, in);
}

CostModel PrefillImpl::cost(const PrefillInputs& in) const { return prefill_cost_model(in, info().out_dtype); }

}  // namespace mla
