#include "mla/core/indexer_cache.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {
namespace {

constexpr int64_t kTokenBytes = kIndexerTokenBytes;

// The smallest power of two >= s, exactly (frexp, not log2/exp2, which can round): s is a
// positive normal float32 here (>= 1e-4/448).
float ue8m0(float s) {
  int e2 = 0;
  const float m = std::frexp(s, &e2);  // s = m * 2^e2, m in [0.5, 1)
  return m == 0.5f ? s : std::ldexp(1.0f, e2);
}

}  // namespace

const char* to_string(IndexerScaleOp op) {
  switch (op) {
    case IndexerScaleOp::divide: return "divide";
    case IndexerScaleOp::times_reciprocal: return "times_reciprocal";
  }
  return "unknown";
}

IndexerScaleOp indexer_scale_op_from_string(std::string_view s) {
  if (s == "divide") return IndexerScaleOp::divide;
  if (s == "times_reciprocal") return IndexerScaleOp::times_reciprocal;
  throw Error(fmt::format("unknown indexer scale operation '{}' (known: divide, times_reciprocal)", s));
}

float indexer_key_scale(double amax, ScaleFmt fmt, IndexerScaleOp op) {
  if (std::isnan(amax)) return std::numeric_limits<float>::quiet_NaN();
  // float32 throughout, as every writer computes it: the cast is exact for bf16 keys.
  const float a = std::max(static_cast<float>(amax), 1e-4f);
  // 1/448 is not a float32: act_quant multiplies by its float32 rounding, which moves about half
  // of all fp32 scales by one ulp against the division.
  const float s = op == IndexerScaleOp::divide ? a / 448.0f : a * static_cast<float>(1.0 / 448.0);
  if (fmt == ScaleFmt::fp32 || std::isinf(s)) return s;
  return ue8m0(s);
}

std::string indexer_recipe_formula(ScaleFmt fmt, IndexerScaleOp op) {
  return fmt::format("{}{}", op == IndexerScaleOp::divide ? "max(amax, 1e-4) / 448" : "max(amax, 1e-4) * float32(1/448)",
                     fmt == ScaleFmt::ue8m0 ? " rounded up to a power of two" : " in float32");
}

std::vector<std::vector<uint16_t>> indexer_edge_keys() {
  // O(1) values of both signs, a fixed pattern (the edges are what matter here).
  const auto ordinary = [] {
    std::vector<uint16_t> k(static_cast<std::size_t>(kIndexerHeadDim));
    for (int64_t d = 0; d < kIndexerHeadDim; ++d) k[static_cast<std::size_t>(d)] = bf16_from_float(static_cast<float>((d * 37) % 17 - 8) / 8.0f);
    return k;
  };
  std::vector<std::vector<uint16_t>> keys;
  keys.emplace_back(static_cast<std::size_t>(kIndexerHeadDim), bf16_from_float(0.0f));
  auto big = ordinary();
  big[0] = 0x7F7F, big[1] = 0xFF7F, big[2] = bf16_from_float(-1e37f);
  keys.push_back(big);
  auto saturating = ordinary();
  for (uint32_t b = 0x3F80; b < 0x4000; ++b) {
    const float a = bf16_to_float(static_cast<uint16_t>(b));
    if (a / (a / 448.0f) > 448.0f) {
      saturating[7] = static_cast<uint16_t>(b);
      break;
    }
  }
  keys.push_back(saturating);
  std::vector<uint16_t> tiny(static_cast<std::size_t>(kIndexerHeadDim));
  for (int64_t d = 0; d < kIndexerHeadDim; ++d) tiny[static_cast<std::size_t>(d)] = bf16_from_float((d % 2 ? -1e-6f : 1e-5f) * static_cast<float>(d % 7));
  keys.push_back(tiny);
  auto neg_zero = ordinary();
  neg_zero[5] = 0x8000;
  keys.push_back(neg_zero);
  return keys;
}

int64_t indexer_code_offset(int64_t block_size, int64_t slot) {
  return (slot / block_size) * block_size * kTokenBytes + (slot % block_size) * kIndexerHeadDim;
}

int64_t indexer_scale_offset(int64_t block_size, int64_t slot) {
  return (slot / block_size) * block_size * kTokenBytes + block_size * kIndexerHeadDim + (slot % block_size) * kIndexerScaleBytes;
}

int64_t indexer_cache_bytes(const IndexerAppendShape& s) { return s.num_blocks * s.block_size * kTokenBytes; }

IndexerByte indexer_byte_at(int64_t block_size, int64_t offset) {
  const int64_t block = offset / (block_size * kTokenBytes), in = offset % (block_size * kTokenBytes);
  IndexerByte b;
  if (in < block_size * kIndexerHeadDim) {
    b.slot = block * block_size + in / kIndexerHeadDim;
    b.dim = in % kIndexerHeadDim;
  } else {
    b.slot = block * block_size + (in - block_size * kIndexerHeadDim) / kIndexerScaleBytes;
    b.scale = true;
    b.dim = (in - block_size * kIndexerHeadDim) % kIndexerScaleBytes;
  }
  return b;
}

IndexerAppendBuffers::IndexerAppendBuffers(const IndexerAppendInputs& in)
    : shape(in.shape),
      keys(in.keys.begin(), in.keys.end()),
      slot_mapping(in.slot_mapping.begin(), in.slot_mapping.end()),
      cache(in.cache.begin(), in.cache.end()) {}

IndexerAppendInputs IndexerAppendBuffers::view() const { return {shape, keys, slot_mapping, cache}; }

void validate_indexer_append_inputs(const IndexerAppendInputs& in, std::string_view who) {
  const auto& s = in.shape;
  const std::string prefix = who.empty() ? std::string() : fmt::format("{}: ", who);
  if (s.block_size < 1) throw Error(fmt::format("{}block_size={}: it must be >= 1", prefix, s.block_size));
  if (s.num_blocks < 0) throw Error(fmt::format("{}num_blocks={}: it must be >= 0", prefix, s.num_blocks));
  if (s.num_tokens < 0) throw Error(fmt::format("{}num_tokens={}: it must be >= 0", prefix, s.num_tokens));
  if (s.scale_fmt != ScaleFmt::fp32 && s.scale_fmt != ScaleFmt::ue8m0) {
    throw Error(fmt::format("{}unknown scale_fmt {}", prefix, static_cast<int>(s.scale_fmt)));
  }
  const auto expect = [&](const char* what, std::size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      throw Error(fmt::format("{}{} has {} elements, the shape needs {}", prefix, what, got, want));
    }
  };
  expect("keys", in.keys.size(), s.num_tokens * kIndexerHeadDim);
  expect("slot_mapping", in.slot_mapping.size(), s.num_tokens);
  expect("cache (bytes)", in.cache.size(), indexer_cache_bytes(s));
  const int64_t slots = s.num_blocks * s.block_size;
  std::unordered_map<int64_t, int64_t> owner;  // slot -> the first token on it
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    const int64_t slot = in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot < 0) continue;  // skipped: its key is never read
    if (slot >= slots) {
      throw Error(fmt::format("{}slot_mapping[{}] = {} is past the cache's {} slots (num_blocks {} x block_size {})",
                              prefix, t, slot, slots, s.num_blocks, s.block_size));
    }
    if (const auto [it, fresh] = owner.emplace(slot, t); !fresh) {
      throw Error(fmt::format("{}slot_mapping[{}] and slot_mapping[{}] are both slot {}: duplicate slots", prefix,
                              it->second, t, slot));
    }
    for (int64_t d = 0; d < kIndexerHeadDim; ++d) {
      const float k = bf16_to_float(in.keys[static_cast<std::size_t>(t * kIndexerHeadDim + d)]);
      if (!std::isfinite(k)) {
        throw Error(fmt::format("{}keys[{}, {}] is {}: a written key must be finite (its scale would not be)", prefix,
                                t, d, k));
      }
    }
  }
}

CostModel indexer_append_cost_model(const IndexerAppendInputs& in) {
  const int64_t written = std::count_if(in.slot_mapping.begin(), in.slot_mapping.end(), [](int64_t s) { return s >= 0; });
  const double n = static_cast<double>(in.shape.num_tokens);
  CostModel c;
  c.bytes = n * kIndexerHeadDim * 2.0 + n * 8.0 + static_cast<double>(written) * kTokenBytes;
  c.flops = 3.0 * static_cast<double>(written) * kIndexerHeadDim;
  return c;
}

std::optional<std::string> IndexerAppendImpl::check(const IndexerAppendShape& s) const {
  const auto& i = info();
  if (std::find(i.scale_fmts.begin(), i.scale_fmts.end(), s.scale_fmt) == i.scale_fmts.end()) {
    return fmt::format("scale_fmt {} is not one it writes", to_string(s.scale_fmt));
  }
  if (!i.block_sizes.empty() &&
      std::find(i.block_sizes.begin(), i.block_sizes.end(), s.block_size) == i.block_sizes.end()) {
    return fmt::format("block_size={} is not one it claims", s.block_size);
  }
  return std::nullopt;
}

}  // namespace mla
