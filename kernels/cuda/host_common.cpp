#include "detail/host_common.hpp"

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

std::vector<double> widen_bf16(const std::vector<uint16_t>& bits) {
  std::vector<double> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = static_cast<double>(bf16_to_float(bits[i]));
  return v;
}

std::vector<double> widen_f32(const std::vector<float>& f) {
  return std::vector<double>(f.begin(), f.end());
}

}  // namespace mla::cuda::detail
