#include "attn_builder.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "mla/core/generator.hpp"

namespace mla::testing {

namespace {

constexpr std::size_t kD = 576;
constexpr uint16_t kBf16NaN = 0x7FC0;

void poison(uint8_t* slot, CacheFormat f) {
  if (f == CacheFormat::bf16) {
    for (std::size_t d = 0; d < kD; ++d) std::memcpy(slot + 2 * d, &kBf16NaN, 2);
    return;
  }
  std::memset(slot, 0x7F, kLatentDim);  // e4m3fn NaN
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int t = 0; t < 4; ++t) std::memcpy(slot + kLatentDim + 4 * t, &nan, 4);
  for (std::size_t j = 0; j < kRopeDim; ++j) std::memcpy(slot + kLatentDim + 16 + 2 * j, &kBf16NaN, 2);
}

std::vector<int> resolve(const std::vector<int>& order, std::size_t n) {  // empty: identity
  if (!order.empty()) return order;
  std::vector<int> id(n);
  std::iota(id.begin(), id.end(), 0);
  return id;
}

}  // namespace

Logical make_logical(const AttnSpec& spec) {
  Logical lg;
  lg.spec = spec;
  lg.s_q = spec.s_q;
  lg.heads = spec.heads;
  lg.topk = spec.topk;
  lg.causal = spec.causal;
  lg.softmax_scale = spec.softmax_scale;
  const std::size_t B = spec.seqlens.size();
  const std::size_t bpt = cache_bytes_per_token(spec.format);
  for (std::size_t b = 0; b < B; ++b) {
    const int64_t L = spec.seqlens[b];
    std::vector<uint16_t> q(static_cast<std::size_t>(spec.s_q * spec.heads) * kD);
    gen::fill_bf16(spec.seed, 100 + b, 0.0, spec.q_std, q);
    lg.q.push_back(std::move(q));

    std::vector<uint8_t> tok(static_cast<std::size_t>(L) * bpt);
    std::vector<double> val(static_cast<std::size_t>(L) * kD);
    if (spec.format == CacheFormat::bf16) {
      std::vector<uint16_t> bits(static_cast<std::size_t>(L) * kD);
      gen::fill_bf16(spec.seed, 200 + b, 0.0, spec.kv_std, bits);
      // memcpy from an empty vector's null data() is undefined even for 0 bytes (UBSan).
      if (!tok.empty()) std::memcpy(tok.data(), bits.data(), tok.size());
      for (std::size_t i = 0; i < bits.size(); ++i) val[i] = bf16_to_float(bits[i]);
    } else {
      std::vector<double> raw(static_cast<std::size_t>(L) * kD);
      gen::fill_f64(spec.seed, 200 + b, 0.0, spec.kv_std, raw);
      for (int64_t t = 0; t < L; ++t) {
        const double* r = raw.data() + t * kD;
        uint8_t* dst = tok.data() + t * bpt;
        fp8_quantize_token({r, kLatentDim}, {r + kLatentDim, kRopeDim}, spec.scale_fmt, {dst, bpt});
        fp8_dequantize_token({dst, bpt}, {val.data() + t * kD, kD});
      }
    }
    lg.tokens.push_back(std::move(tok));
    lg.values.push_back(std::move(val));

    std::vector<int32_t> idx;
    if (spec.topk > 0) {
      // Per row: up to 3/4 of topk distinct valid positions, the rest invalid in every flavour a
      // kernel could mishandle (negative, == L, past L, extreme), all shuffled together.
      const int32_t invalid_kinds[] = {-1, static_cast<int32_t>(L), static_cast<int32_t>(L + 3),
                                       std::numeric_limits<int32_t>::min(), kSentinel};
      for (int s = 0; s < spec.s_q; ++s) {
        const uint64_t stream = 300 + b * 64 + static_cast<uint64_t>(s);
        const int64_t n_valid = std::min<int64_t>(L, spec.topk - spec.topk / 4);
        const auto perm = gen::permutation(spec.seed, stream, L);
        std::vector<int32_t> row;
        for (int64_t k = 0; k < n_valid; ++k) row.push_back(static_cast<int32_t>(perm[static_cast<std::size_t>(k)]));
        for (int64_t k = n_valid; k < spec.topk; ++k) row.push_back(invalid_kinds[k % 5]);
        const auto shuffle = gen::permutation(spec.seed, stream + 100000, spec.topk);
        for (int64_t k = 0; k < spec.topk; ++k) idx.push_back(row[static_cast<std::size_t>(shuffle[static_cast<std::size_t>(k)])]);
      }
    }
    lg.indices.push_back(std::move(idx));
  }
  return lg;
}

Paged lay_out(const Logical& lg, const Layout& layout) {
  const AttnSpec& spec = lg.spec;
  const std::vector<int> order = resolve(layout.order, spec.seqlens.size());
  const int ps = layout.page_size;
  const std::size_t bpt = cache_bytes_per_token(spec.format);
  if (ps < 1) throw std::invalid_argument("page_size must be >= 1");

  int64_t used = 0, longest = 0;
  for (int o : order) {
    const int64_t nb = (spec.seqlens[static_cast<std::size_t>(o)] + ps - 1) / ps;
    used += nb;
    longest = std::max(longest, nb);
  }
  Paged p;
  AttnShape& sh = p.shape;
  sh.batch = static_cast<int>(order.size());
  sh.s_q = spec.s_q;
  sh.heads = spec.heads;
  sh.page_size = ps;
  sh.num_blocks = static_cast<int>(used + layout.spare_blocks);
  sh.max_blocks = static_cast<int>(longest + layout.spare_table);
  sh.topk = spec.topk;
  sh.cache_format = spec.format;
  sh.causal = spec.causal;
  p.softmax_scale = spec.softmax_scale;

  p.kv_cache.resize(static_cast<std::size_t>(sh.num_blocks) * ps * bpt);
  for (int64_t s = 0; s < int64_t{sh.num_blocks} * ps; ++s) poison(p.kv_cache.data() + s * bpt, spec.format);
  p.block_table.assign(static_cast<std::size_t>(sh.batch) * sh.max_blocks, kSentinel);
  const auto phys = gen::permutation(layout.perm_seed, 0, sh.num_blocks);
  int64_t next = 0;
  for (int i = 0; i < sh.batch; ++i) {
    const std::size_t o = static_cast<std::size_t>(order[static_cast<std::size_t>(i)]);
    const int64_t L = spec.seqlens[o];
    p.cache_seqlens.push_back(static_cast<int32_t>(L));
    p.q.insert(p.q.end(), lg.q[o].begin(), lg.q[o].end());
    p.indices.insert(p.indices.end(), lg.indices[o].begin(), lg.indices[o].end());
    for (int64_t j = 0; j < (L + ps - 1) / ps; ++j) {
      const int32_t blk = static_cast<int32_t>(phys[static_cast<std::size_t>(next++)]);
      p.block_table[static_cast<std::size_t>(i) * sh.max_blocks + j] = blk;
      for (int64_t t = j * ps; t < std::min<int64_t>(L, (j + 1) * ps); ++t) {
        std::memcpy(p.kv_cache.data() + (int64_t{blk} * ps + t % ps) * bpt, lg.tokens[o].data() + t * bpt, bpt);
      }
    }
  }
  return p;
}

}  // namespace mla::testing
