#include "detail/host_common.hpp"

#include <cmath>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/attention.hpp"

namespace mla::cuda::detail {

Capabilities dense_bf16_caps() {
  Capabilities c;
  c.cache_formats = {CacheFormat::bf16};
  c.min_heads = 1;
  c.max_heads = 128;
  c.min_s_q = 1;
  c.max_s_q = kMaxSq;
  c.page_sizes = {};  // any
  c.dense = true;
  c.sparse = false;
  c.varlen = true;
  return c;
}

std::optional<std::string> check_dense_bf16_shape(std::string_view kernel, const Capabilities& caps,
                                                  const AttnShape& s) {
  if (auto why = check_capabilities(caps, s)) return fmt::format("{}: {}", kernel, *why);
  if (s.cache_format != CacheFormat::bf16)
    return fmt::format("{}: cache_format {} unsupported (bf16 only)", kernel, to_string(s.cache_format));
  if (s.topk != 0) return fmt::format("{}: sparse attention (topk={}) unsupported", kernel, s.topk);
  if (s.d_qk != 576 || s.d_v != 512)
    return fmt::format("{}: d_qk={} d_v={} unsupported (576/512 only)", kernel, s.d_qk, s.d_v);
  if (s.heads < caps.min_heads || s.heads > caps.max_heads)
    return fmt::format("{}: heads={} outside {}..{}", kernel, s.heads, caps.min_heads, caps.max_heads);
  if (s.s_q < caps.min_s_q || s.s_q > caps.max_s_q)
    return fmt::format("{}: s_q={} outside {}..{}", kernel, s.s_q, caps.min_s_q, caps.max_s_q);
  if (s.batch < 1) return fmt::format("{}: batch={} must be positive", kernel, s.batch);
  if (s.page_size < 1) return fmt::format("{}: page_size={} must be positive", kernel, s.page_size);
  if (s.num_blocks < 1) return fmt::format("{}: num_blocks={} must be positive", kernel, s.num_blocks);
  if (s.max_blocks < 1) return fmt::format("{}: max_blocks={} must be positive", kernel, s.max_blocks);
  return std::nullopt;
}

void validate_paged_inputs(std::string_view kernel, const AttnInputs& in) {
  const AttnShape& s = in.shape;
  auto expect_size = [&](const char* what, std::size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want)
      throw Error(fmt::format("{}: {} has {} elements, the shape needs {}", kernel, what, got, want));
  };
  const int64_t b = s.batch, sq = s.s_q, h = s.heads;
  const int64_t bytes_per_token = static_cast<int64_t>(cache_bytes_per_token(s.cache_format));
  expect_size("q", in.q.size(), b * sq * h * 576);
  if (static_cast<int64_t>(in.kv_cache.size()) != int64_t{s.num_blocks} * s.page_size * bytes_per_token)
    throw Error(fmt::format("{}: kv_cache (bytes) has {} elements, the shape needs {} ({} cache, {} bytes "
                            "per token)",
                            kernel, in.kv_cache.size(), int64_t{s.num_blocks} * s.page_size * bytes_per_token,
                            to_string(s.cache_format), bytes_per_token));
  expect_size("block_table", in.block_table.size(), b * s.max_blocks);
  expect_size("cache_seqlens", in.cache_seqlens.size(), b);
  if (!std::isfinite(in.softmax_scale))
    throw Error(fmt::format("{}: softmax_scale {} is not finite", kernel, in.softmax_scale));
  const int64_t capacity = int64_t{s.max_blocks} * s.page_size;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t L = in.cache_seqlens[static_cast<std::size_t>(i)];
    if (L < 0 || L > capacity)
      throw Error(fmt::format("{}: cache_seqlens[{}] = {} outside [0, max_blocks·page_size = {}]",
                              kernel, i, L, capacity));
    const int64_t pages = (L + s.page_size - 1) / s.page_size;
    for (int64_t j = 0; j < pages; ++j) {
      const int32_t id = in.block_table[static_cast<std::size_t>(i * s.max_blocks + j)];
      if (id < 0 || id >= s.num_blocks)
        throw Error(fmt::format("{}: block_table[{}][{}] = {} outside [0, num_blocks = {}) but sequence "
                                "{} has {} tokens on {} pages",
                                kernel, i, j, id, s.num_blocks, i, L, pages));
    }
  }
}

void validate_dense_bf16_inputs(std::string_view kernel, const AttnInputs& in) {
  validate_paged_inputs(kernel, in);
  if (!in.indices.empty())
    throw Error(fmt::format("{}: indices given ({} elements) for dense attention", kernel, in.indices.size()));
}

std::vector<double> widen_bf16(const std::vector<uint16_t>& bits) {
  std::vector<double> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = static_cast<double>(bf16_to_float(bits[i]));
  return v;
}

std::vector<double> widen_f32(const std::vector<float>& f) {
  return std::vector<double>(f.begin(), f.end());
}

}  // namespace mla::cuda::detail
