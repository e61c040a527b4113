// The indexer logits calls drawn at run time (family fresh, rows of file fresh_indexer_logits),
// inside the kernel's claims (layouts, next_n, heads, block sizes, width):
//   paged, per next_n (1 and 2) and block size (its claimed ones, or 64): context lengths 0, 1,
//        block_size - 1, block_size, block_size + 1 and 2·block_size + 3, each sequence's blocks
//        drawn from a shuffled pool; every cache byte and block-table entry no sequence reads is
//        garbage (e4m3 NaN codes among them), so a kernel that reads past a context shows;
//   ragged: a prefill of 12 rows after a prefix of 40 keys (row i sees [0, 40 + i]), two packed
//        sequences of 5 and 7 keys seen causally, an empty row and one whose end is before its
//        start.
// q codes of normal values at magnitude 100 (spread over the e4m3 range, never NaN), head
// weights of both signs at q-scale magnitude, keys of magnitude 10^U(-2, 2) quantized by the
// indexer append's oracle (ue8m0 scales), 64 heads (V3.2's index_n_heads) unless it claims others.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kinds/indexer_logits/indexer_logits_rows.hpp"
#include "mla/core/generator.hpp"
#include "mla/ref/indexer_append.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {


// Draws from one key: stream `stream`, the i-th value.
struct LogitsDraw {
  uint64_t key;
  uint64_t next = 0;
  double normal(uint64_t stream) { return gen::value(key, stream, next++, 0, 1); }
  double uniform(uint64_t stream) { return gen::uniform01(key, stream, next++); }
  uint64_t bits(uint64_t stream) { return gen::bits(key, stream, next++); }
};

std::vector<uint8_t> q_codes(int64_t n, LogitsDraw& d) {
  std::vector<uint8_t> c(static_cast<std::size_t>(n));
  for (auto& x : c) x = e4m3_from_double(std::clamp(d.normal(1) * 100.0, -448.0, 448.0));
  return c;
}

std::vector<float> head_weights(int64_t n, LogitsDraw& d) {
  std::vector<float> w(static_cast<std::size_t>(n));
  for (auto& x : w) x = static_cast<float>(d.normal(2) * 0.125 * 3e-3);
  return w;
}

ref::IndexerKeyQuant drawn_key(LogitsDraw& d) {
  const double mag = std::pow(10.0, -2 + 4 * d.uniform(3));
  std::vector<uint16_t> key(static_cast<std::size_t>(kIndexerHeadDim));
  for (auto& k : key) k = bf16_from_float(static_cast<float>(mag * d.normal(3)));
  return ref::indexer_quantize_key(key, ScaleFmt::ue8m0, IndexerScaleOp::divide);
}

DrawnIndexerLogits paged(uint64_t key, int next_n, int64_t heads, int64_t block_size, uint64_t seed) {
  LogitsDraw d{key};
  const std::vector<int32_t> ctx{0, 1, static_cast<int32_t>(block_size - 1), static_cast<int32_t>(block_size),
                                 static_cast<int32_t>(block_size + 1), static_cast<int32_t>(2 * block_size + 3)};
  IndexerLogitsShape s;
  s.layout = IndexerLogitsLayout::paged;
  s.batch = static_cast<int64_t>(ctx.size());
  s.next_n = next_n;
  s.heads = heads;
  s.block_size = block_size;
  const int64_t longest = *std::max_element(ctx.begin(), ctx.end());
  s.max_blocks = (longest + block_size - 1) / block_size + 1;  // one entry past the longest: never read
  s.max_context = longest + 3;
  int64_t used = 0;
  for (const auto c : ctx) used += (c + block_size - 1) / block_size;
  s.num_blocks = used + 2;
  DrawnIndexerLogits c;
  auto& b = c.inputs;
  b.shape = s;
  b.q = q_codes(s.rows() * heads * kIndexerHeadDim, d);
  b.weights = head_weights(s.rows() * heads, d);
  b.cache.resize(static_cast<std::size_t>(s.num_blocks * block_size * kIndexerTokenBytes));
  for (std::size_t i = 0; i < b.cache.size(); ++i) b.cache[i] = i % 3 == 0 ? 0x7F : static_cast<uint8_t>(d.bits(4));
  b.context_lens = ctx;
  b.block_table.assign(static_cast<std::size_t>(s.batch * s.max_blocks), -7);
  place_paged_keys(b, gen::permutation(key, 5, s.num_blocks), [&](int64_t, int64_t, uint8_t* codes, float& scale) {
    const auto k = drawn_key(d);
    std::memcpy(codes, k.codes.data(), kIndexerHeadDim);
    scale = k.scale;
  });
  c.name = fmt::format("indexer_logits_paged_next_n{}_bs{}_h{}", next_n, block_size, heads);
  c.description = fmt::format("paged indexer logits, next_n {}, block size {}, {} heads, context lengths 0, 1, {}, {}, {}, "
                              "{} on a shuffled block pool; unread cache bytes and block-table entries garbage (drawn "
                              "from seed {}, truth from the C++ oracle)",
                              next_n, block_size, heads, block_size - 1, block_size, block_size + 1, 2 * block_size + 3,
                              seed);
  return c;
}

DrawnIndexerLogits ragged(uint64_t key, int64_t heads, uint64_t seed) {
  LogitsDraw d{key};
  std::vector<int32_t> ks, ke;
  for (int32_t i = 0; i < 12; ++i) ks.push_back(0), ke.push_back(41 + i);
  for (int32_t i = 0; i < 5; ++i) ks.push_back(52), ke.push_back(53 + i);
  for (int32_t i = 0; i < 7; ++i) ks.push_back(57), ke.push_back(58 + i);
  ks.push_back(30), ke.push_back(30);
  ks.push_back(64), ke.push_back(12);
  DrawnIndexerLogits c;
  auto& b = c.inputs;
  b.shape.layout = IndexerLogitsLayout::ragged;
  b.shape.batch = static_cast<int64_t>(ks.size());
  b.shape.heads = heads;
  b.shape.num_keys = 64;
  b.q = q_codes(b.shape.rows() * heads * kIndexerHeadDim, d);
  b.weights = head_weights(b.shape.rows() * heads, d);
  for (int64_t t = 0; t < b.shape.num_keys; ++t) {
    const auto k = drawn_key(d);
    b.k_codes.insert(b.k_codes.end(), k.codes.begin(), k.codes.end());
    b.k_scales.push_back(k.scale);
  }
  b.ks = std::move(ks);
  b.ke = std::move(ke);
  c.name = fmt::format("indexer_logits_ragged_h{}", heads);
  c.description = fmt::format("ragged indexer logits, {} heads, 64 keys: a 12-row prefill after a 40-key prefix, packed "
                              "sequences of 5 and 7 keys, an empty row and one whose end is before its start (drawn "
                              "from seed {}, truth from the C++ oracle)",
                              heads, seed);
  return c;
}

}  // namespace

std::vector<DrawnIndexerLogits> draw_indexer_logits_cases(uint64_t seed, const IndexerLogitsKernelInfo& info) {
  const uint64_t base = hash_text(seed, "indexer_logits");
  const int64_t heads = info.heads.empty() ? 64 : info.heads.front();
  std::vector<DrawnIndexerLogits> cases;
  for (const auto layout : info.layouts) {
    if (layout == IndexerLogitsLayout::ragged) {
      cases.push_back(ragged(hash_text(base, "ragged"), heads, seed));
      continue;
    }
    const std::vector<int> next_ns = info.next_ns.empty() ? std::vector<int>{1, 2} : info.next_ns;
    const std::vector<int64_t> sizes = info.block_sizes.empty() ? std::vector<int64_t>{64} : info.block_sizes;
    for (const int n : next_ns) {
      for (const auto bs : sizes) cases.push_back(paged(hash_text(base, fmt::format("paged/{}/{}", n, bs)), n, heads, bs, seed));
    }
  }
  return cases;
}

}  // namespace mla::certify
