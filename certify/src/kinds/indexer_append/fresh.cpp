// The indexer key cache appends drawn at run time (family fresh, rows of file
// fresh_indexer_append): per scale format the kernel claims and per block size (its claimed ones,
// or 64, vLLM's and DeepGEMM's, and 16), one append of bf16 keys into a paged 132-byte cache:
//   keys     each token its own magnitude 10^U(-3, 3); the edge keys (indexer_edge_keys: all
//            zero, bf16's largest, a saturating amax, under the clamp, a negative zero) on the
//            first tokens;
//   slots    a permutation of the cache's slots but its last one (never written: where a kernel
//            that indexes a negative slot from the end writes), the last block partly filled;
//            every 7th token skipped with slot -1, one with -5;
//   cache    every byte drawn from the seed before the call: what no token writes must keep it,
//            and a kernel cannot know it in advance.
#include <algorithm>

#include <fmt/format.h>

#include "kinds/indexer_append/indexer_append_rows.hpp"
#include "mla/core/generator.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {


DrawnIndexerAppend draw_case(uint64_t key, ScaleFmt fmt, int64_t block_size, uint64_t seed) {
  DrawnIndexerAppend c;
  auto& b = c.inputs;
  // About 2.5 blocks of tokens on 3 blocks (at least 40 tokens), so the last block is partial.
  const int64_t num_blocks = block_size >= 16 ? 3 : std::max<int64_t>(3, 48 / block_size);
  const int64_t slots_total = num_blocks * block_size;
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(slots_total - 1, std::max<int64_t>(40, slots_total * 5 / 6)));
  b.shape = {n, num_blocks, block_size, fmt};
  b.keys.resize(static_cast<std::size_t>(n * kIndexerHeadDim));
  for (int64_t t = 0; t < n; ++t) {
    const double mag = std::pow(10.0, -3 + 6 * gen::uniform01(key, 0, static_cast<uint64_t>(t)));
    for (int64_t d = 0; d < kIndexerHeadDim; ++d) {
      const auto i = static_cast<uint64_t>(t * kIndexerHeadDim + d);
      b.keys[i] = bf16_from_float(static_cast<float>(gen::value(key, 1, i, 0, mag)));
    }
  }
  const auto edges = indexer_edge_keys();
  for (std::size_t t = 0; t < edges.size() && static_cast<int64_t>(t) < n; ++t) {
    std::copy(edges[t].begin(), edges[t].end(), b.keys.begin() + static_cast<std::ptrdiff_t>(t) * kIndexerHeadDim);
  }
  // Every slot but the last, shuffled; the first n of them.
  const auto perm = gen::permutation(key, 2, slots_total - 1);
  b.slot_mapping.assign(perm.begin(), perm.begin() + n);
  int64_t skipped = 0;
  for (int64_t t = 6; t < n; t += 7) b.slot_mapping[static_cast<std::size_t>(t)] = -1, ++skipped;
  if (n > 10) b.slot_mapping[10] = -5, ++skipped;
  b.cache.resize(static_cast<std::size_t>(indexer_cache_bytes(b.shape)));
  for (std::size_t i = 0; i < b.cache.size(); ++i) b.cache[i] = static_cast<uint8_t>(gen::bits(key, 3, i));
  c.name = fmt::format("indexer_append_{}_bs{}_t{}", to_string(fmt), block_size, n);
  c.description = fmt::format("{} bf16 keys ({} skipped: slot -1, one -5) into a {} x {} slot 132-byte cache, {} scales; "
                              "edge keys (all zero, bf16's largest, a saturating amax, under the clamp, -0) among "
                              "magnitudes 1e-3..1e3; shuffled slots, the last never written; prior bytes drawn "
                              "(drawn from seed {}, truth from the C++ oracle)",
                              n, skipped, num_blocks, block_size, to_string(fmt), seed);
  return c;
}

}  // namespace

std::vector<DrawnIndexerAppend> draw_indexer_append_cases(uint64_t seed, const IndexerAppendKernelInfo& info) {
  const uint64_t base = hash_text(seed, "indexer_append");
  std::vector<int64_t> sizes = info.block_sizes;
  if (sizes.empty()) sizes = {64, 16};
  std::vector<DrawnIndexerAppend> cases;
  for (const auto fmt : info.scale_fmts) {
    for (const auto bs : sizes) {
      cases.push_back(draw_case(hash_text(base, fmt::format("{}/{}", to_string(fmt), bs)), fmt, bs, seed));
    }
  }
  return cases;
}

}  // namespace mla::certify
