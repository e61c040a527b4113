// The fresh twin of a stored indexer logits call (mla/certify/twin.hpp).
#include <cmath>

#include <fmt/format.h>

#include "kinds/twin_draw.hpp"
#include "mla/certify/twin.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"

namespace mla::certify {
namespace {

constexpr std::size_t kDim = 128;  // an index head's and a key's width

// n vectors of 128 e4m3 codes, each mapped: new i = old from[i], sign bit flipped by flip[i] (exact
// in e4m3, NaN codes stay NaN).
void map_codes(uint8_t* v, std::size_t n, const std::vector<int>& from, const std::vector<uint8_t>& flip) {
  uint8_t old[kDim];
  for (std::size_t r = 0; r < n; ++r, v += kDim) {
    std::copy(v, v + kDim, old);
    for (std::size_t i = 0; i < kDim; ++i) v[i] = static_cast<uint8_t>(old[from[i]] ^ (flip[i] ? 0x80u : 0u));
  }
}

}  // namespace

IndexerLogitsBuffers make_indexer_logits_twin(const IndexerLogitsInputs& in, uint64_t seed, double w_noise) {
  const auto& s = in.shape;
  const auto rows = static_cast<std::size_t>(s.rows()), heads = static_cast<std::size_t>(s.heads);
  if (in.q.size() != rows * heads * kDim || in.weights.size() != rows * heads) {
    throw Error(fmt::format("an indexer twin needs q [{}, {}, 128] and weights [{}, {}] (got {} and {} values)", rows,
                            heads, rows, heads, in.q.size(), in.weights.size()));
  }
  TwinDraw d(seed);
  const auto head = d.permutation(static_cast<int>(heads));
  const auto from = d.permutation(static_cast<int>(kDim));
  const auto flip = d.signs(static_cast<int>(kDim));
  IndexerLogitsBuffers t(in);
  // Heads permuted in q and its weights alike, then every q and key vector's dimensions mapped.
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t src = r * heads + static_cast<std::size_t>(head[h]), dst = r * heads + h;
      std::copy(in.q.begin() + static_cast<std::ptrdiff_t>(src * kDim), in.q.begin() + static_cast<std::ptrdiff_t>((src + 1) * kDim),
                t.q.begin() + static_cast<std::ptrdiff_t>(dst * kDim));
      t.weights[dst] = in.weights[src];
    }
  }
  map_codes(t.q.data(), rows * heads, from, flip);
  if (s.layout == IndexerLogitsLayout::paged) {
    // Each block: its tokens' codes first, then their scales (left as they are).
    const auto block = static_cast<std::size_t>(s.block_size);
    for (std::size_t b = 0; b < static_cast<std::size_t>(s.num_blocks); ++b) {
      map_codes(t.cache.data() + b * block * (kDim + 4), block, from, flip);
    }
  } else {
    map_codes(t.k_codes.data(), static_cast<std::size_t>(s.num_keys), from, flip);
  }
  // The weights moved by noise of w_noise of their RMS: new logits, the case's scale.
  double sum2 = 0;
  for (const float w : t.weights) sum2 += static_cast<double>(w) * w;
  const double sd = t.weights.empty() ? 0.0 : w_noise * std::sqrt(sum2 / static_cast<double>(t.weights.size()));
  const uint64_t noise_seed = d.next();
  for (std::size_t i = 0; i < t.weights.size() && sd > 0; ++i) {
    t.weights[i] = static_cast<float>(t.weights[i] + gen::value(noise_seed, 0, i, 0.0, sd));
  }
  return t;
}

}  // namespace mla::certify
