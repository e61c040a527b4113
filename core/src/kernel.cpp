#include "mla/core/kernel.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"

namespace mla {

const char* to_string(KernelRole r) {
  switch (r) {
    case KernelRole::oracle: return "oracle";
    case KernelRole::baseline: return "baseline";
    case KernelRole::optimized: return "optimized";
  }
  return "unknown";
}

KernelRole kernel_role_from_string(std::string_view s) {
  for (auto r : {KernelRole::oracle, KernelRole::baseline, KernelRole::optimized}) {
    if (s == to_string(r)) return r;
  }
  throw Error(fmt::format("unknown kernel role '{}' (expected oracle, baseline or optimized)", s));
}

PrecisionClass precision_class(const KernelInfo& k) { return precision_class(k.compute, k.out_dtype); }

std::optional<std::string> check_capabilities(const Capabilities& caps, const AttnShape& shape) {
  std::vector<std::string> why;
  if (shape.d_qk != 576 || shape.d_v != 512) {
    why.push_back(fmt::format("d_qk={} d_v={} not 576/512", shape.d_qk, shape.d_v));
  }
  if (shape.batch < 1) why.push_back(fmt::format("batch={} must be >= 1", shape.batch));
  if (shape.page_size < 1) why.push_back(fmt::format("page_size={} must be >= 1", shape.page_size));
  if (std::find(caps.cache_formats.begin(), caps.cache_formats.end(), shape.cache_format) ==
      caps.cache_formats.end()) {
    why.push_back(fmt::format("cache format {} not supported", to_string(shape.cache_format)));
  }
  if (shape.heads < caps.min_heads || shape.heads > caps.max_heads) {
    why.push_back(fmt::format("heads={} outside [{},{}]", shape.heads, caps.min_heads, caps.max_heads));
  }
  if (shape.s_q < caps.min_s_q || shape.s_q > caps.max_s_q) {
    why.push_back(fmt::format("s_q={} outside [{},{}]", shape.s_q, caps.min_s_q, caps.max_s_q));
  }
  if (!caps.page_sizes.empty() &&
      std::find(caps.page_sizes.begin(), caps.page_sizes.end(), shape.page_size) == caps.page_sizes.end()) {
    why.push_back(fmt::format("page_size={} not in {{{}}}", shape.page_size, fmt::join(caps.page_sizes, ",")));
  }
  if (shape.topk < 0) why.push_back(fmt::format("topk={} must be >= 0", shape.topk));
  if (shape.topk > 0 && !caps.sparse) why.push_back("sparse not supported");
  if (shape.topk == 0 && !caps.dense) why.push_back("dense not supported");
  if (why.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(why, "; "));
}

std::optional<std::string> check_varlen(const Capabilities& caps, std::span<const int32_t> seqlens) {
  if (caps.varlen || seqlens.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(seqlens.begin(), seqlens.end());
  if (*lo == *hi) return std::nullopt;
  return fmt::format("varlen not supported (cache_seqlens range from {} to {})", *lo, *hi);
}

nlohmann::json to_json(const Capabilities& c) {
  std::vector<std::string> formats;
  for (auto f : c.cache_formats) formats.push_back(to_string(f));
  return {{"cache_formats", formats}, {"min_heads", c.min_heads}, {"max_heads", c.max_heads},
          {"min_s_q", c.min_s_q},     {"max_s_q", c.max_s_q},     {"page_sizes", c.page_sizes},
          {"dense", c.dense},         {"sparse", c.sparse},       {"varlen", c.varlen}};
}

Capabilities capabilities_from_json(const nlohmann::json& j) {
  try {
    Capabilities c;
    for (const auto& f : j.at("cache_formats")) c.cache_formats.push_back(cache_format_from_string(f.get<std::string>()));
    c.min_heads = j.at("min_heads");
    c.max_heads = j.at("max_heads");
    c.min_s_q = j.at("min_s_q");
    c.max_s_q = j.at("max_s_q");
    c.page_sizes = j.at("page_sizes").get<std::vector<int>>();
    c.dense = j.at("dense");
    c.sparse = j.at("sparse");
    c.varlen = j.at("varlen");
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed capabilities: {}", e.what()));
  }
}

namespace {

void need_at_least(const char* what, std::size_t have, int64_t want) {
  if (want < 0 || static_cast<int64_t>(have) < want) {
    throw Error(fmt::format("cost model: {} has {} elements, the shape needs {}", what, have, want));
  }
}

}  // namespace

AttnTraffic attention_traffic(const AttnInputs& in) {
  const AttnShape& sh = in.shape;
  need_at_least("cache_seqlens", in.cache_seqlens.size(), sh.batch);
  if (sh.topk > 0) need_at_least("indices", in.indices.size(), int64_t{sh.batch} * sh.s_q * sh.topk);
  AttnTraffic t;
  t.per_sequence_tokens.resize(static_cast<std::size_t>(std::max(sh.batch, 0)));
  std::unordered_set<int32_t> seen;
  for (int64_t b = 0; b < sh.batch; ++b) {
    const int64_t L = std::max<int32_t>(in.cache_seqlens[static_cast<std::size_t>(b)], 0);
    int64_t tokens = 0;
    if (sh.topk == 0) {
      for (int64_t s = 0; s < sh.s_q; ++s) {
        const int64_t n = dense_last_position(sh, L, s) + 1;
        t.pairs += n;
        tokens = std::max(tokens, n);
      }
    } else {
      seen.clear();
      for (int64_t s = 0; s < sh.s_q; ++s) {
        const std::size_t row = static_cast<std::size_t>((b * sh.s_q + s) * sh.topk);
        for (int64_t k = 0; k < sh.topk; ++k) {
          const int32_t idx = in.indices[row + static_cast<std::size_t>(k)];
          if (idx < 0 || idx >= L) continue;
          ++t.pairs;
          seen.insert(idx);
        }
      }
      tokens = static_cast<int64_t>(seen.size());
    }
    t.per_sequence_tokens[static_cast<std::size_t>(b)] = tokens;
    t.tokens += tokens;
  }
  return t;
}

CostModel mla_cost_model(const AttnInputs& in, OutDType out_dtype) {
  const AttnShape& sh = in.shape;
  const AttnTraffic t = attention_traffic(in);
  const double rows = static_cast<double>(sh.batch) * sh.s_q * sh.heads;
  CostModel c;
  c.bytes = rows * sh.d_qk * 2                                                      // q, bf16
            + static_cast<double>(t.tokens) * cache_bytes_per_token(sh.cache_format)  // latent cache, read once
            + rows * sh.d_v * out_bytes_per_value(out_dtype)                          // out
            + rows * 4;                                                               // lse, fp32
  c.flops = 2.0 * static_cast<double>(t.pairs) * sh.heads * (sh.d_qk + sh.d_v);
  return c;
}

CostModel mla_cost_model(const AttnInputs& in) { return mla_cost_model(in, OutDType::bf16); }

std::optional<std::string> AttentionImpl::check(const AttnShape& shape) const {
  return check_capabilities(info().caps, shape);
}

CostModel AttentionImpl::cost(const AttnInputs& in) const { return mla_cost_model(in, info().out_dtype); }

}  // namespace mla
