#include "mla/core/sparse_prefill.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

namespace mla {

SparsePrefillBuffers::SparsePrefillBuffers(const SparsePrefillInputs& in)
    : shape(in.shape),
      sm_scale(in.sm_scale),
      q(in.q.begin(), in.q.end()),
      kv(in.kv.begin(), in.kv.end()),
      indices(in.indices.begin(), in.indices.end()),
      attn_sink(in.attn_sink.begin(), in.attn_sink.end()),
      topk_length(in.topk_length.begin(), in.topk_length.end()) {}

SparsePrefillInputs SparsePrefillBuffers::view() const {
  return {shape, sm_scale, q, kv, indices, attn_sink, topk_length};
}

bool sparse_prefill_key(const SparsePrefillInputs& in, int64_t i, int64_t j) {
  const auto& s = in.shape;
  const int32_t idx = in.indices[static_cast<std::size_t>(i * s.topk + j)];
  if (idx < 0 || idx >= s.s_kv) return false;
  return !s.topk_length || j < in.topk_length[static_cast<std::size_t>(i)];
}

void validate_sparse_prefill_inputs(const SparsePrefillInputs& in, std::string_view who) {
  const auto& s = in.shape;
  const std::string p = who.empty() ? std::string() : fmt::format("{}: ", who);
  if (s.d_qk != kMlaDqk && s.d_qk != static_cast<int>(kLatentDim)) {
    throw Error(fmt::format("{}d_qk {}: a sparse prefill takes 576 (latent and rope) or 512", p, s.d_qk));
  }
  if (s.s_q < 0 || s.s_kv < 0 || s.heads < 1 || s.topk < 1) {
    throw Error(fmt::format("{}s_q={} s_kv={} heads={} topk={}: s_q and s_kv must be >= 0, heads and topk >= 1", p, s.s_q,
                            s.s_kv, s.heads, s.topk));
  }
  if (!std::isfinite(in.sm_scale) || in.sm_scale <= 0) throw Error(fmt::format("{}sm_scale {} is not a finite positive number", p, in.sm_scale));
  const auto sized = [&](const char* what, std::size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      throw Error(fmt::format("{}{} holds {} values, the shape needs {}", p, what, got, want));
    }
  };
  sized("q", in.q.size(), s.s_q * s.heads * s.d_qk);
  sized("kv", in.kv.size(), s.s_kv * s.d_qk);
  sized("indices", in.indices.size(), s.s_q * s.topk);
  sized("attn_sink", in.attn_sink.size(), s.sink ? s.heads : 0);
  sized("topk_length", in.topk_length.size(), s.topk_length ? s.s_q : 0);
  const auto finite = [&](const char* what, std::span<const uint16_t> v) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(bf16_to_float(v[i]))) throw Error(fmt::format("{}{}[{}] is not finite", p, what, i));
    }
  };
  finite("q", in.q);
  finite("kv", in.kv);
  for (std::size_t h = 0; h < in.attn_sink.size(); ++h) {
    if (std::isnan(in.attn_sink[h])) throw Error(fmt::format("{}attn_sink[{}] is NaN", p, h));
  }
  for (std::size_t i = 0; i < in.topk_length.size(); ++i) {
    if (in.topk_length[i] < 0 || in.topk_length[i] > s.topk) {
      throw Error(fmt::format("{}topk_length[{}] = {} outside [0, topk = {}]", p, i, in.topk_length[i], s.topk));
    }
  }
  std::set<int32_t> seen;
  for (int64_t i = 0; i < s.s_q; ++i) {
    seen.clear();
    for (int64_t j = 0; j < s.topk; ++j) {
      if (!sparse_prefill_key(in, i, j)) continue;
      const int32_t idx = in.indices[static_cast<std::size_t>(i * s.topk + j)];
      if (!seen.insert(idx).second) {
        throw Error(fmt::format("{}indices[{}]: position {} is listed twice (it would be attended twice)", p, i, idx));
      }
    }
  }
}

AttnBuffers sparse_prefill_as_decode(const SparsePrefillInputs& in) {
  validate_sparse_prefill_inputs(in, "sparse prefill");
  const auto& s = in.shape;
  const auto width = static_cast<std::size_t>(s.d_qk);
  AttnBuffers b;
  b.shape.batch = 1;
  b.shape.s_q = static_cast<int>(s.s_q);
  b.shape.heads = s.heads;
  b.shape.page_size = static_cast<int>(std::max<int64_t>(s.s_kv, 1));
  b.shape.num_blocks = 1;
  b.shape.max_blocks = 1;
  b.shape.topk = s.topk;
  b.shape.cache_format = CacheFormat::bf16;
  b.shape.causal = false;
  b.softmax_scale = in.sm_scale;
  // Rows of 576 values: a 512-wide call gets zero rope columns, which add nothing to a score.
  b.q.assign(static_cast<std::size_t>(s.s_q * s.heads) * kMlaDqk, 0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.s_q * s.heads); ++r) {
    std::copy_n(in.q.begin() + static_cast<std::ptrdiff_t>(r * width), width, b.q.begin() + static_cast<std::ptrdiff_t>(r * kMlaDqk));
  }
  std::vector<uint16_t> tokens(static_cast<std::size_t>(b.shape.page_size) * kMlaDqk, 0);
  for (std::size_t t = 0; t < static_cast<std::size_t>(s.s_kv); ++t) {
    std::copy_n(in.kv.begin() + static_cast<std::ptrdiff_t>(t * width), width, tokens.begin() + static_cast<std::ptrdiff_t>(t * kMlaDqk));
  }
  b.kv_cache.resize(tokens.size() * 2);
  std::copy_n(reinterpret_cast<const uint8_t*>(tokens.data()), b.kv_cache.size(), b.kv_cache.begin());
  b.block_table = {0};
  b.cache_seqlens = {static_cast<int32_t>(s.s_kv)};
  b.indices.resize(static_cast<std::size_t>(s.s_q * s.topk));
  for (int64_t i = 0; i < s.s_q; ++i) {
    for (int64_t j = 0; j < s.topk; ++j) {
      const auto at = static_cast<std::size_t>(i * s.topk + j);
      b.indices[at] = sparse_prefill_key(in, i, j) ? in.indices[at] : -1;
    }
  }
  return b;
}

void sparse_prefill_apply_sink(const SparsePrefillInputs& in, std::vector<double>& out, std::span<const double> lse) {
  const auto& s = in.shape;
  if (!s.sink) return;
  for (int64_t i = 0; i < s.s_q; ++i) {
    for (int h = 0; h < s.heads; ++h) {
      const double l = lse[static_cast<std::size_t>(i * s.heads + h)];
      if (!std::isfinite(l)) continue;  // no key: out stays 0
      const double w = 1.0 / (1.0 + std::exp(static_cast<double>(in.attn_sink[static_cast<std::size_t>(h)]) - l));
      double* row = out.data() + static_cast<std::size_t>((i * s.heads + h) * kSparsePrefillDv);
      for (int d = 0; d < kSparsePrefillDv; ++d) row[d] *= w;
    }
  }
}

CostModel sparse_prefill_cost_model(const SparsePrefillInputs& in, OutDType out_dtype) {
  const auto& s = in.shape;
  double keys = 0;
  for (int64_t i = 0; i < s.s_q; ++i) {
    for (int64_t j = 0; j < s.topk; ++j) keys += sparse_prefill_key(in, i, j) ? 1 : 0;
  }
  CostModel c;
  c.flops = 2.0 * keys * s.heads * (s.d_qk + kSparsePrefillDv);
  const double rows = static_cast<double>(s.s_q) * s.heads;
  c.bytes = 2.0 * rows * s.d_qk + 2.0 * keys * s.d_qk + 4.0 * static_cast<double>(s.s_q) * s.topk +
            static_cast<double>(out_bytes_per_value(out_dtype)) * rows * kSparsePrefillDv + 8.0 * rows;
  return c;
}

std::optional<std::string> SparsePrefillImpl::check(const SparsePrefillShape& s) const {
  const auto& i = info();
  if (!i.heads.empty() && std::find(i.heads.begin(), i.heads.end(), s.heads) == i.heads.end()) {
    return fmt::format("{} heads: it takes {}", s.heads, fmt::join(i.heads, ", "));
  }
  if (i.topk_multiple > 1 && s.topk % i.topk_multiple != 0) {
    return fmt::format("topk {} is not a multiple of {}", s.topk, i.topk_multiple);
  }
  if (!i.d_qks.empty() && std::find(i.d_qks.begin(), i.d_qks.end(), s.d_qk) == i.d_qks.end()) {
    return fmt::format("d_qk {}: it takes {}", s.d_qk, fmt::join(i.d_qks, ", "));
  }
  if (s.sink && !i.sink) return std::string("an attention sink: it takes none");
  if (s.topk_length && !i.topk_length) return std::string("topk_length: it takes none");
  return std::nullopt;
}

}  // namespace mla
