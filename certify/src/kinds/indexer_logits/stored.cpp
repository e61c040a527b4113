// The indexer family's stored cases as indexer logits calls (indexer_logits_rows.hpp says which
// call a kernel gets). The operands are the stored ones as the reference computed them from a
// layer: q codes and head weights of every stored query row, the key codes and scales of every
// cached position; the truth is the C++ oracle's on them, which the reference's own float64
// logits are held to (suites/reference/test_reference_indexer.cpp).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "kinds/indexer_logits/indexer_logits_rows.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/indexer_cache.hpp"

namespace mla::certify {
namespace {


// Every stored query row, by sequence and position: its q codes [H, 128] and head weights [H].
struct LogitsRow {
  const uint8_t* q = nullptr;
  const float* w = nullptr;
};

}  // namespace

IndexerLogitsBuffers stored_indexer_call(const golden::IndexerCase& c, const IndexerLogitsKernelInfo& info) {
  if (c.steps.empty()) throw Error(fmt::format("indexer case {} has no step", c.name));
  // The cache after the last step, [b, T, 128] and [b, T]; and each (sequence, position)'s row.
  golden::IndexerKeys keys = c.keys_through(c.steps.size() - 1);
  const int64_t b = c.batch, H = c.heads, T = keys.positions;
  auto& codes = keys.codes;
  auto& scales = keys.scales;
  std::vector<LogitsRow> rows(static_cast<std::size_t>(b * T));
  for (const auto& s : c.steps) {
    for (int64_t q = 0; q < b; ++q) {
      for (int64_t i = 0; i < s.seqlen; ++i) {
        const auto src = static_cast<std::size_t>(q * s.seqlen + i);
        rows[static_cast<std::size_t>(q * T + s.start_pos + i)] = {s.q_codes.data() + src * static_cast<std::size_t>(H * kIndexerHeadDim),
                                                                   s.weights.data() + src * static_cast<std::size_t>(H)};
      }
    }
  }
  const auto take_row = [&](IndexerLogitsBuffers& out, int64_t q, int64_t pos) {
    const LogitsRow& r = rows[static_cast<std::size_t>(q * T + pos)];
    out.q.insert(out.q.end(), r.q, r.q + H * kIndexerHeadDim);
    out.weights.insert(out.weights.end(), r.w, r.w + H);
  };
  IndexerLogitsBuffers out;
  out.shape.heads = H;
  const bool paged = std::find(info.layouts.begin(), info.layouts.end(), IndexerLogitsLayout::paged) != info.layouts.end();
  if (!paged) {
    // Every stored row: sequence q's keys at [q * T, (q + 1) * T), row (q, p) sees [q * T, q * T + p].
    out.shape.layout = IndexerLogitsLayout::ragged;
    out.shape.batch = b * T;
    out.shape.num_keys = b * T;
    out.k_codes = std::move(codes);
    out.k_scales = std::move(scales);
    for (int64_t q = 0; q < b; ++q) {
      for (int64_t p = 0; p < T; ++p) {
        take_row(out, q, p);
        out.ks.push_back(static_cast<int32_t>(q * T));
        out.ke.push_back(static_cast<int32_t>(q * T + p + 1));
      }
    }
    return out;
  }
  // Paged: each sequence's last next_n positions as a decode step with a speculative token
  // (row i at position T - next_n + i sees 0 .. T - next_n + i: the stored causal horizon).
  const bool two = info.next_ns.empty() || std::find(info.next_ns.begin(), info.next_ns.end(), 2) != info.next_ns.end();
  auto& s = out.shape;
  s.layout = IndexerLogitsLayout::paged;
  s.batch = b;
  s.next_n = two && T >= 2 ? 2 : 1;
  s.block_size = info.block_sizes.empty() ? 64 : info.block_sizes.front();
  const int64_t per_seq = (T + s.block_size - 1) / s.block_size;
  s.max_blocks = per_seq + 1;  // one entry past the last block: never read
  s.num_blocks = b * per_seq + 2;
  s.max_context = T;
  for (int64_t q = 0; q < b; ++q) {
    for (int64_t i = 0; i < s.next_n; ++i) take_row(out, q, T - s.next_n + i);
  }
  out.context_lens.assign(static_cast<std::size_t>(b), static_cast<int32_t>(T));
  // Garbage, e4m3 NaN codes among it, wherever no row reads: a kernel that reads past a
  // context, or a block-table entry it should not, shows.
  out.cache.resize(static_cast<std::size_t>(s.num_blocks * s.block_size * kIndexerTokenBytes));
  for (std::size_t i = 0; i < out.cache.size(); ++i) {
    out.cache[i] = i % 3 == 0 ? 0x7F : static_cast<uint8_t>(gen::bits(static_cast<uint64_t>(c.seed), 6, i));
  }
  out.block_table.assign(static_cast<std::size_t>(b * s.max_blocks), -7);
  place_paged_keys(out, gen::permutation(static_cast<uint64_t>(c.seed), 5, s.num_blocks),
                   [&](int64_t q, int64_t pos, uint8_t* dst, float& scale) {
                     const auto at = static_cast<std::size_t>(q * T + pos);
                     std::memcpy(dst, codes.data() + at * kIndexerHeadDim, kIndexerHeadDim);
                     scale = scales[at];
                   });
  return out;
}

}  // namespace mla::certify
