#include "mla/core/needles.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

namespace mla::needles {
namespace {

constexpr int64_t D = static_cast<int64_t>(kQkDim), Dv = static_cast<int64_t>(kLatentDim);

// Smallest power of two >= x > 0, exact (frexp), as the reference computes it.
double pow2_ceil(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);
  return m == 0.5 ? x : std::ldexp(1.0, e);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<int64_t> positions(int64_t length, int64_t page_size) {
  std::vector<int64_t> p;
  for (int64_t t = 0; t < length; ++t) {
    const int64_t m = t % kTile, q = t % page_size;
    if (m == 0 || m == kTile - 1 || q == 0 || q == page_size - 1 || t == length - 1) p.push_back(t);
  }
  return p;
}

int64_t slots(int64_t n_needles, int64_t heads) {
  return std::max<int64_t>(1, std::min({kMaxSlots, ceil_div(heads, 2), n_needles / 2}));
}

bool is_long(std::span<const int32_t> seqlens) {
  return std::any_of(seqlens.begin(), seqlens.end(), [](int32_t L) { return L >= kLongTokens; });
}

std::string refusal(std::span<const int32_t> seqlens, int64_t page_size, int64_t heads) {
  if (page_size <= 0 || heads <= 0) return fmt::format("page size {} and {} heads", page_size, heads);
  for (std::size_t i = 0; i < seqlens.size(); ++i) {
    const auto n = static_cast<int64_t>(positions(seqlens[i], page_size).size());
    if (n == 0) continue;
    const int64_t S = slots(n, heads), R = ceil_div(n, S);
    if (R > kMaxRanks) {
      return fmt::format("sequence {}: {} needles in {} slots need {} ranks > {} (more heads or a larger page size)", i,
                         n, S, R, kMaxRanks);
    }
  }
  return {};
}

int fewest_heads(std::span<const int32_t> seqlens, int64_t page_size, int lo, int hi) {
  for (int h = std::max(lo, 1); h <= hi; ++h)
    if (refusal(seqlens, page_size, h).empty()) return h;
  return 0;
}

Overlay make_overlay(const AttnInputs& in) {
  const AttnShape& s = in.shape;
  if (s.cache_format != CacheFormat::bf16) throw Error("needles are defined over bf16 caches only");
  const int64_t b = s.batch, sq = s.s_q, h = s.heads, ps = s.page_size, mb = s.max_blocks;
  if (const std::string no = refusal(in.cache_seqlens, ps, h); !no.empty()) throw Error("needles-v1: " + no);
  const auto* cache = reinterpret_cast<const uint16_t*>(in.kv_cache.data());

  // Q = max|q| over the whole case, K = max|k| over every used slot, both before the overlay.
  double q_max = 0, k_max = 0;
  for (const uint16_t v : in.q.first(static_cast<std::size_t>(b * sq * h * D)))
    q_max = std::max(q_max, std::fabs(static_cast<double>(bf16_to_float(v))));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t L = in.cache_seqlens[static_cast<std::size_t>(i)];
    for (int64_t t = 0; t < L; ++t) {
      const int64_t blk = in.block_table[static_cast<std::size_t>(i * mb + t / ps)];
      const uint16_t* tok = cache + (blk * ps + t % ps) * D;
      for (int64_t d = 0; d < D; ++d) k_max = std::max(k_max, std::fabs(static_cast<double>(bf16_to_float(tok[d]))));
    }
  }
  // 576·Q·K + 64/σ in float64, in that order (this file is built without contraction to FMA).
  Overlay o;
  o.alpha = pow2_ceil(576.0 * q_max * k_max + 64.0 / in.softmax_scale);
  const uint16_t alpha_bits = bf16_from_double(o.alpha), one = bf16_from_double(1.0);
  if (static_cast<double>(bf16_to_float(alpha_bits)) != o.alpha) throw Error(fmt::format("needle alpha {} is not a bf16 value", o.alpha));
  o.q_mask.assign(static_cast<std::size_t>(b * D), 0);
  o.q_values.assign(static_cast<std::size_t>(b * h * D), 0);
  for (int64_t i = 0; i < b; ++i) {
    const std::vector<int64_t> p = positions(in.cache_seqlens[static_cast<std::size_t>(i)], ps);
    const auto n = static_cast<int64_t>(p.size());
    if (n == 0) continue;
    const int64_t S = slots(n, h), R = ceil_div(n, S);
    const uint16_t spike = bf16_from_double(pow2_ceil(2.0 * static_cast<double>(R)));
    uint8_t* mask = o.q_mask.data() + i * D;
    std::fill_n(mask, R, uint8_t{1});
    std::fill_n(mask + Dv, S, uint8_t{1});
    for (int64_t u = 0; u < ceil_div(h, 2); ++u) o.q_values[static_cast<std::size_t>((i * h + 2 * u) * D + Dv + u % S)] = one;
    for (int64_t k = 0; k < n; ++k) {
      o.positions.push_back(static_cast<int32_t>(i));
      o.positions.push_back(static_cast<int32_t>(p[static_cast<std::size_t>(k)]));
      const std::size_t row = o.kv.size();
      o.kv.resize(row + static_cast<std::size_t>(D), 0);
      o.kv[row + static_cast<std::size_t>(k / S)] = spike;
      o.kv[row + static_cast<std::size_t>(Dv + k % S)] = alpha_bits;
    }
  }
  return o;
}

void apply(const Overlay& o, AttnBuffers& buf) {
  const AttnShape& s = buf.shape;
  if (s.cache_format != CacheFormat::bf16) throw Error("needles are defined over bf16 caches only");
  const int64_t b = s.batch, sq = s.s_q, h = s.heads, ps = s.page_size, mb = s.max_blocks;
  if (o.q_mask.size() != static_cast<std::size_t>(b * D) || o.q_values.size() != static_cast<std::size_t>(b * h * D) ||
      o.kv.size() != static_cast<std::size_t>(o.count() * D))
    throw Error("needle overlay does not match the case's shape");
  for (int64_t i = 0; i < b; ++i)
    for (int64_t d = 0; d < D; ++d) {
      if (!o.q_mask[static_cast<std::size_t>(i * D + d)]) continue;
      for (int64_t j = 0; j < sq; ++j)
        for (int64_t hh = 0; hh < h; ++hh)
          buf.q[static_cast<std::size_t>(((i * sq + j) * h + hh) * D + d)] = o.q_values[static_cast<std::size_t>((i * h + hh) * D + d)];
    }
  for (int64_t k = 0; k < o.count(); ++k) {
    const int64_t i = o.positions[static_cast<std::size_t>(2 * k)], t = o.positions[static_cast<std::size_t>(2 * k + 1)];
    if (i < 0 || i >= b || t < 0 || t >= buf.cache_seqlens[static_cast<std::size_t>(i)])
      throw Error(fmt::format("needle {} at ({}, {}) outside the sequences", k, i, t));
    const int64_t blk = buf.block_table[static_cast<std::size_t>(i * mb + t / ps)];
    std::memcpy(buf.kv_cache.data() + static_cast<std::size_t>((blk * ps + t % ps) * D) * sizeof(uint16_t),
                o.kv.data() + k * D, static_cast<std::size_t>(D) * sizeof(uint16_t));
  }
}

}  // namespace mla::needles
