// The fresh twin of a stored case (twin.hpp).
#include "mla/certify/twin.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "kinds/twin_draw.hpp"

namespace mla::certify {
namespace {

constexpr int kBlocks = static_cast<int>(kLatentDim / kFp8BlockSize);
constexpr int kBlock = static_cast<int>(kFp8BlockSize);

// New dimension i holds old dimension from[i], negated when flip[i].
struct DimMap {
  std::vector<int> from;
  std::vector<uint8_t> flip;
  std::vector<int> block;  // latent: new block nb holds old block block[nb] (and its FP8 scale)
};

DimMap latent_map(TwinDraw& d) {
  DimMap m;
  m.block = d.permutation(kBlocks);
  m.from.resize(kLatentDim);
  for (int nb = 0; nb < kBlocks; ++nb) {
    const auto inner = d.permutation(kBlock);
    for (int i = 0; i < kBlock; ++i) {
      m.from[static_cast<std::size_t>(nb * kBlock + i)] = m.block[static_cast<std::size_t>(nb)] * kBlock + inner[static_cast<std::size_t>(i)];
    }
  }
  m.flip = d.signs(static_cast<int>(kLatentDim));
  return m;
}

DimMap rope_map(TwinDraw& d) {
  DimMap m;
  m.from = d.permutation(static_cast<int>(kRopeDim));
  m.flip = d.signs(static_cast<int>(kRopeDim));
  return m;
}

// One 576-value bf16 vector (a q row or a bf16 cache token): latent then rope.
void map_bf16_row(const uint16_t* src, uint16_t* dst, const DimMap& lat, const DimMap& rope) {
  for (std::size_t i = 0; i < kLatentDim; ++i) dst[i] = bf16_signed(src[lat.from[i]], lat.flip[i] != 0);
  for (std::size_t i = 0; i < kRopeDim; ++i) dst[kLatentDim + i] = bf16_signed(src[kLatentDim + rope.from[i]], rope.flip[i] != 0);
}

// One 656-byte FP8 token: [512 e4m3 | 4 float32 scales | 64 bf16 rope]; a sign flip is the e4m3
// sign bit (a NaN stays a NaN, a zero becomes a zero).
void map_fp8_token(const uint8_t* src, uint8_t* dst, const DimMap& lat, const DimMap& rope) {
  for (std::size_t i = 0; i < kLatentDim; ++i) {
    dst[i] = static_cast<uint8_t>(src[lat.from[i]] ^ (lat.flip[i] ? 0x80u : 0u));
  }
  for (int nb = 0; nb < kBlocks; ++nb) {
    std::memcpy(dst + kLatentDim + 4 * nb, src + kLatentDim + 4 * lat.block[static_cast<std::size_t>(nb)], 4);
  }
  const std::size_t rope_at = kLatentDim + 4 * kBlocks;
  for (std::size_t i = 0; i < kRopeDim; ++i) {
    uint16_t x;
    std::memcpy(&x, src + rope_at + 2 * static_cast<std::size_t>(rope.from[i]), 2);
    x = bf16_signed(x, rope.flip[i] != 0);
    std::memcpy(dst + rope_at + 2 * i, &x, 2);
  }
}

}  // namespace

// kTwinQNoise: small enough that a case built around one dominant logit keeps it, large enough
// that every logit moves by many bf16 steps.
AttnBuffers make_twin(const AttnInputs& in, uint64_t seed, double q_noise, TwinMap* map) {
  const auto& s = in.shape;
  const std::size_t bpt = cache_bytes_per_token(s.cache_format);
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.s_q;
  if (s.d_qk != static_cast<int>(kQkDim) || in.q.size() != rows * s.heads * kQkDim ||
      in.kv_cache.size() != static_cast<std::size_t>(s.num_blocks) * s.page_size * bpt ||
      in.block_table.size() != static_cast<std::size_t>(s.batch) * s.max_blocks) {
    throw Error(fmt::format("a twin needs a 576-wide case whose buffers match its shape (q {} values, cache {} bytes, "
                            "block table {} entries)", in.q.size(), in.kv_cache.size(), in.block_table.size()));
  }
  TwinDraw d(seed);
  const auto lat = latent_map(d);
  const auto rope = rope_map(d);
  const auto heads = d.permutation(s.heads);
  const auto pages = d.permutation(s.num_blocks);  // old block b moves to pages[b]
  if (map) *map = TwinMap{heads, lat.from, rope.from, lat.flip, rope.flip};

  AttnBuffers t;
  t.shape = s;
  t.softmax_scale = in.softmax_scale;
  t.cache_seqlens.assign(in.cache_seqlens.begin(), in.cache_seqlens.end());
  t.indices.assign(in.indices.begin(), in.indices.end());

  // q: heads permuted, dimensions mapped, then the noise.
  const double noise = bf16_noise_sd(in.q, q_noise);
  t.q.resize(in.q.size());
  const uint64_t noise_seed = d.next();
  for (std::size_t r = 0; r < rows; ++r) {
    for (int h = 0; h < s.heads; ++h) {
      const uint16_t* src = in.q.data() + (r * s.heads + static_cast<std::size_t>(heads[static_cast<std::size_t>(h)])) * kQkDim;
      uint16_t* dst = t.q.data() + (r * s.heads + static_cast<std::size_t>(h)) * kQkDim;
      map_bf16_row(src, dst, lat, rope);
      if (noise == 0) continue;
      for (std::size_t i = 0; i < kQkDim; ++i) {
        const std::size_t at = static_cast<std::size_t>(dst - t.q.data()) + i;
        dst[i] = bf16_from_double(static_cast<double>(bf16_to_float(dst[i])) + gen::value(noise_seed, 0, at, 0.0, noise));
      }
    }
  }

  // The cache: each token's dimensions mapped, each page moved to its new place.
  t.kv_cache.resize(in.kv_cache.size());
  const std::size_t page_bytes = static_cast<std::size_t>(s.page_size) * bpt;
  for (int b = 0; b < s.num_blocks; ++b) {
    const uint8_t* src = in.kv_cache.data() + static_cast<std::size_t>(b) * page_bytes;
    uint8_t* dst = t.kv_cache.data() + static_cast<std::size_t>(pages[static_cast<std::size_t>(b)]) * page_bytes;
    for (int p = 0; p < s.page_size; ++p) {
      const std::size_t off = static_cast<std::size_t>(p) * bpt;
      if (s.cache_format == CacheFormat::fp8) {
        map_fp8_token(src + off, dst + off, lat, rope);
      } else {
        uint16_t a[kQkDim], b2[kQkDim];
        std::memcpy(a, src + off, sizeof a);
        map_bf16_row(a, b2, lat, rope);
        std::memcpy(dst + off, b2, sizeof b2);
      }
    }
  }
  // Block-table entries a sequence owns follow their pages; every other entry (the sentinel, or
  // whatever the case put past a sequence's pages) is carried as it is.
  t.block_table.assign(in.block_table.begin(), in.block_table.end());
  for (int b = 0; b < s.batch; ++b) {
    const int64_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
    const int64_t owned = std::min<int64_t>(s.max_blocks, (L + s.page_size - 1) / s.page_size);
    for (int64_t j = 0; j < owned; ++j) {
      auto& e = t.block_table[static_cast<std::size_t>(b) * s.max_blocks + static_cast<std::size_t>(j)];
      if (e >= 0 && e < s.num_blocks) e = pages[static_cast<std::size_t>(e)];
    }
  }
  return t;
}

}  // namespace mla::certify
