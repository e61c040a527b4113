#include "mla/core/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

namespace mla {

const char* to_string(CacheFormat f) {
  switch (f) {
    case CacheFormat::bf16: return "bf16";
    case CacheFormat::fp8: return "fp8";
  }
  return "unknown";
}

const char* to_string(OutDType d) {
  switch (d) {
    case OutDType::f64: return "f64";
    case OutDType::f32: return "f32";
    case OutDType::bf16: return "bf16";
  }
  return "unknown";
}

CacheFormat cache_format_from_string(std::string_view s) {
  for (auto f : {CacheFormat::bf16, CacheFormat::fp8}) {
    if (s == to_string(f)) return f;
  }
  throw Error(fmt::format("unknown cache format '{}' (expected bf16 or fp8)", s));
}

OutDType out_dtype_from_string(std::string_view s) {
  for (auto d : {OutDType::f64, OutDType::f32, OutDType::bf16}) {
    if (s == to_string(d)) return d;
  }
  throw Error(fmt::format("unknown output dtype '{}' (expected f64, f32 or bf16)", s));
}

std::size_t cache_bytes_per_token(CacheFormat f) {
  switch (f) {
    case CacheFormat::bf16: return kQkDim * 2;  // 1152
    case CacheFormat::fp8: return kFp8TokenBytes;  // 656
  }
  throw Error(fmt::format("unknown cache format {}", static_cast<int>(f)));
}

std::size_t out_bytes_per_value(OutDType d) {
  switch (d) {
    case OutDType::f64: return 8;
    case OutDType::f32: return 4;
    case OutDType::bf16: return 2;
  }
  throw Error(fmt::format("unknown output dtype {}", static_cast<int>(d)));
}

std::vector<int64_t> out_shape(const AttnShape& s) { return {s.batch, s.s_q, s.heads, s.d_v}; }
std::vector<int64_t> lse_shape(const AttnShape& s) { return {s.batch, s.heads, s.s_q}; }

AttnBuffers::AttnBuffers(const AttnInputs& in)
    : shape(in.shape),
      softmax_scale(in.softmax_scale),
      q(in.q.begin(), in.q.end()),
      kv_cache(in.kv_cache.begin(), in.kv_cache.end()),
      block_table(in.block_table.begin(), in.block_table.end()),
      cache_seqlens(in.cache_seqlens.begin(), in.cache_seqlens.end()),
      indices(in.indices.begin(), in.indices.end()) {}

AttnInputs AttnBuffers::view() const {
  AttnInputs in;
  in.shape = shape;
  in.softmax_scale = softmax_scale;
  in.q = q;
  in.kv_cache = kv_cache;
  in.block_table = block_table;
  in.cache_seqlens = cache_seqlens;
  in.indices = indices;
  return in;
}

int64_t dense_last_position(const AttnShape& shape, int64_t L, int64_t s) {
  if (L <= 0) return -1;
  const int64_t last = shape.causal ? L - shape.s_q + s : L - 1;
  return std::clamp<int64_t>(last, -1, L - 1);
}

std::vector<int64_t> sparse_row_positions(const AttnInputs& in, int64_t b, int64_t s) {
  const AttnShape& sh = in.shape;
  const int64_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
  const auto row = in.indices.subspan(static_cast<std::size_t>((b * sh.s_q + s) * sh.topk),
                                      static_cast<std::size_t>(sh.topk));
  std::vector<int64_t> pos;
  pos.reserve(row.size());
  for (int32_t idx : row) {
    if (idx >= 0 && idx < L) pos.push_back(idx);
  }
  std::sort(pos.begin(), pos.end());
  const auto dup = std::adjacent_find(pos.begin(), pos.end());
  if (dup != pos.end()) {
    throw Error(fmt::format("indices[{}][{}] holds valid position {} more than once (valid entries of a row "
                            "must be distinct)",
                            b, s, *dup));
  }
  return pos;
}

std::string InputProblem::message() const { return fmt::format("{} outside {}{}", found, expected, detail); }

std::optional<InputProblem> paging_problem(const AttnShape& s, std::span<const int32_t> block_table,
                                           std::span<const int32_t> cache_seqlens) {
  const int64_t capacity = int64_t{s.max_blocks} * s.page_size;
  for (int64_t i = 0; i < s.batch; ++i) {
    const int64_t L = cache_seqlens[static_cast<std::size_t>(i)];
    if (L < 0 || L > capacity) {
      return InputProblem{"cache_seqlens", fmt::format("cache_seqlens[{}] = {}", i, L),
                          fmt::format("[0, max_blocks·page_size = {}]", capacity), ""};
    }
    // Entries past the used pages are data (the sentinel that catches over-reads); entries of
    // used pages must address a real block or every kernel would read out of bounds.
    const int64_t pages = (L + s.page_size - 1) / s.page_size;
    for (int64_t j = 0; j < pages; ++j) {
      const int32_t id = block_table[static_cast<std::size_t>(i * s.max_blocks + j)];
      if (id < 0 || id >= s.num_blocks) {
        return InputProblem{"block_table", fmt::format("block_table[{}][{}] = {}", i, j, id),
                            fmt::format("[0, num_blocks = {})", s.num_blocks),
                            fmt::format(" but sequence {} has {} tokens on {} pages", i, L, pages)};
      }
    }
  }
  return std::nullopt;
}

void validate_attention_inputs(const AttnInputs& in, std::string_view who) {
  const AttnShape& sh = in.shape;
  const std::string prefix = who.empty() ? std::string() : fmt::format("{}: ", who);
  if (sh.d_qk != kMlaDqk || sh.d_v != kMlaDv) {
    throw UnsupportedError(fmt::format("{}d_qk={} d_v={}: the MLA attention core is defined for {}/{}", prefix,
                                       sh.d_qk, sh.d_v, kMlaDqk, kMlaDv));
  }
  auto at_least = [&](const char* name, int64_t v, int64_t lo) {
    if (v < lo) throw Error(fmt::format("{}{}={} must be >= {}", prefix, name, v, lo));
  };
  at_least("batch", sh.batch, 1);
  at_least("s_q", sh.s_q, 1);
  at_least("heads", sh.heads, 1);
  at_least("page_size", sh.page_size, 1);
  at_least("num_blocks", sh.num_blocks, 0);
  at_least("max_blocks", sh.max_blocks, 0);
  at_least("topk", sh.topk, 0);
  if (sh.cache_format != CacheFormat::bf16 && sh.cache_format != CacheFormat::fp8) {
    throw Error(fmt::format("{}cache_format={} is not a known format", prefix, static_cast<int>(sh.cache_format)));
  }
  if (!std::isfinite(in.softmax_scale)) {
    throw Error(fmt::format("{}softmax_scale {} is not finite", prefix, in.softmax_scale));
  }
  auto expect_size = [&](const char* what, std::size_t got, int64_t want, const std::string& note = {}) {
    if (static_cast<int64_t>(got) != want) {
      throw Error(fmt::format("{}{} has {} elements, the shape needs {}{}", prefix, what, got, want, note));
    }
  };
  const int64_t b = sh.batch, sq = sh.s_q, h = sh.heads;
  const int64_t bytes_per_token = static_cast<int64_t>(cache_bytes_per_token(sh.cache_format));
  expect_size("q", in.q.size(), b * sq * h * kMlaDqk);
  expect_size("kv_cache (bytes)", in.kv_cache.size(), int64_t{sh.num_blocks} * sh.page_size * bytes_per_token,
              fmt::format(" ({} cache, {} bytes per token)", to_string(sh.cache_format), bytes_per_token));
  expect_size("block_table", in.block_table.size(), b * sh.max_blocks);
  expect_size("cache_seqlens", in.cache_seqlens.size(), b);
  if (sh.topk == 0 && !in.indices.empty()) {
    throw Error(fmt::format("{}indices given ({} elements) for dense attention", prefix, in.indices.size()));
  }
  if (sh.topk > 0) {
    expect_size("indices", in.indices.size(), b * sq * sh.topk,
                fmt::format(" ([b={}, s_q={}, topk={}])", sh.batch, sh.s_q, sh.topk));
  }
  if (auto p = paging_problem(sh, in.block_table, in.cache_seqlens)) throw Error(prefix + p->message());
  if (sh.topk > 0) {
    try {
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t s = 0; s < sq; ++s) (void)sparse_row_positions(in, i, s);
      }
    } catch (const Error& e) {
      throw Error(prefix + e.what());
    }
  }
}

// ---- shapes written down -------------------------------------------------------------------

nlohmann::json to_json(const AttnShape& s) {
  nlohmann::json j = {{"batch", s.batch},           {"s_q", s.s_q},
                      {"heads", s.heads},           {"page_size", s.page_size},
                      {"num_blocks", s.num_blocks}, {"max_blocks", s.max_blocks},
                      {"topk", s.topk},             {"causal", s.causal},
                      {"cache_format", to_string(s.cache_format)}};
  if (s.d_qk != kMlaDqk) j["d_qk"] = s.d_qk;
  if (s.d_v != kMlaDv) j["d_v"] = s.d_v;
  return j;
}

AttnShape attn_shape_from_json(const nlohmann::json& j) {
  try {
    AttnShape s;
    s.batch = j.at("batch").get<int>();
    s.s_q = j.at("s_q").get<int>();
    s.heads = j.at("heads").get<int>();
    s.page_size = j.at("page_size").get<int>();
    s.num_blocks = j.at("num_blocks").get<int>();
    s.max_blocks = j.at("max_blocks").get<int>();
    s.topk = j.at("topk").get<int>();
    s.causal = j.at("causal").get<bool>();
    s.cache_format = cache_format_from_string(j.at("cache_format").get<std::string>());
    s.d_qk = j.value("d_qk", kMlaDqk);
    s.d_v = j.value("d_v", kMlaDv);
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("malformed attention shape {}: {}", j.dump(), e.what()));
  }
}

AttnShape attn_shape_from_attributes(const ShapeAttributes& a) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  AttnShape s;
  s.batch = static_cast<int>(a.integer("batch", 1, kMax));
  s.s_q = static_cast<int>(a.integer("s_q", 1, kMax));
  s.heads = static_cast<int>(a.integer("heads", 1, kMax));
  s.d_qk = static_cast<int>(a.integer("d_qk", kMlaDqk, kMlaDqk));
  s.d_v = static_cast<int>(a.integer("d_v", kMlaDv, kMlaDv));
  s.page_size = static_cast<int>(a.integer("page_size", 1, kMax));
  s.num_blocks = static_cast<int>(a.integer("num_blocks", 1, kMax));
  s.max_blocks = static_cast<int>(a.integer("max_blocks", 1, kMax));
  s.topk = static_cast<int>(a.integer("topk", 0, kMax));
  s.causal = a.integer("causal", 0, 1) != 0;
  const std::string format = a.string("cache_format");
  for (auto f : {CacheFormat::bf16, CacheFormat::fp8}) {
    if (format == to_string(f)) {
      s.cache_format = f;
      return s;
    }
  }
  a.refuse("cache_format", "cache_format 'bf16' or 'fp8'", fmt::format("'{}'", format));
  return s;  // not reached: refuse() throws
}

ScaleFmt fp8_scale_fmt_from_attributes(const ShapeAttributes& a) {
  const std::string s = a.string("scale_fmt");
  for (auto f : {ScaleFmt::fp32, ScaleFmt::ue8m0}) {
    if (s == to_string(f)) return f;
  }
  a.refuse("scale_fmt", "scale_fmt 'fp32' or 'ue8m0'", fmt::format("'{}'", s));
  return ScaleFmt::fp32;  // not reached: refuse() throws
}

Fp8Recipe fp8_recipe_from_attributes(const ShapeAttributes& a) {
  if (!a.has("fp8_recipe")) return Fp8Recipe::deepseek_v32;
  const std::string s = a.string("fp8_recipe");
  for (auto r : {Fp8Recipe::deepseek_v32, Fp8Recipe::flashmla}) {
    if (s == to_string(r)) return r;
  }
  a.refuse("fp8_recipe", "fp8_recipe 'deepseek_v32' or 'flashmla'", fmt::format("'{}'", s));
  return Fp8Recipe::deepseek_v32;  // not reached: refuse() throws
}

}  // namespace mla
