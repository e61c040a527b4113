#include "mla/core/indexer_logits.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/indexer_cache.hpp"

namespace mla {
namespace {

using Layout = IndexerLogitsLayout;

bool e4m3_nan(uint8_t c) { return (c & 0x7F) == 0x7F; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The shape's own fields, before any span is looked at.
void validate_shape(const IndexerLogitsShape& s, const std::string& prefix) {
  if (s.batch < 0) throw Error(fmt::format("{}batch={}: it must be >= 0", prefix, s.batch));
  if (s.heads < 1) throw Error(fmt::format("{}heads={}: it must be >= 1", prefix, s.heads));
  if (s.layout == Layout::ragged) {
    if (s.next_n != 1) throw Error(fmt::format("{}next_n={}: a ragged call has one query per row (1)", prefix, s.next_n));
    if (s.num_keys < 0) throw Error(fmt::format("{}num_keys={}: it must be >= 0", prefix, s.num_keys));
    return;
  }
  if (s.layout != Layout::paged) throw Error(fmt::format("{}unknown layout {}", prefix, static_cast<int>(s.layout)));
  // DeepGEMM's paged kernel is built for one query token per sequence and for one speculative
  // token besides it (V3.2's multi-token prediction depth is 1).
  if (s.next_n != 1 && s.next_n != 2) throw Error(fmt::format("{}next_n={}: it must be 1 or 2", prefix, s.next_n));
  if (s.block_size < 1) throw Error(fmt::format("{}block_size={}: it must be >= 1", prefix, s.block_size));
  if (s.num_blocks < 0 || s.max_blocks < 0 || s.max_context < 0) {
    throw Error(fmt::format("{}num_blocks={} max_blocks={} max_context={}: they must be >= 0", prefix, s.num_blocks,
                            s.max_blocks, s.max_context));
  }
}

// The positions some row reads, for the key checks: the union of the valid ranges (paged, per
// sequence: its last row's range covers its other rows').
void validate_keys(const IndexerLogitsInputs& in, const std::string& prefix) {
  const auto& s = in.shape;
  const auto check_key = [&](const IndexerKeyRef& k, const std::string& where) {
    for (int64_t d = 0; d < kIndexerHeadDim; ++d) {
      if (e4m3_nan(k.codes[d])) {
        throw Error(fmt::format("{}{} dim {} holds the e4m3 NaN code 0x{:02x} (a quantizer never writes it)", prefix,
                                where, d, k.codes[d]));
      }
    }
    if (!std::isfinite(k.scale) || !(k.scale > 0)) {
      throw Error(fmt::format("{}{} has scale {}: a key scale must be finite and > 0 (max(amax, 1e-4) / 448)", prefix,
                              where, k.scale));
    }
  };
  if (s.layout == Layout::paged) {
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t last_row = b * s.next_n + s.next_n - 1;
      const auto r = indexer_logits_range(in, last_row);
      for (int64_t p = r.begin; p < r.end; ++p) {
        const int64_t block = in.block_table[static_cast<std::size_t>(b * s.max_blocks + p / s.block_size)];
        check_key(indexer_logits_key(in, last_row, p),
                  fmt::format("the key of sequence {} position {} (cache block {}, offset {})", b, p, block,
                              p % s.block_size));
      }
    }
    return;
  }
  std::vector<char> read(static_cast<std::size_t>(s.num_keys), 0);
  for (int64_t r = 0; r < s.batch; ++r) {
    const auto range = indexer_logits_range(in, r);
    std::fill(read.begin() + range.begin, read.begin() + range.end, 1);
  }
  for (int64_t p = 0; p < s.num_keys; ++p) {
    if (read[static_cast<std::size_t>(p)]) {
      check_key(indexer_logits_key(in, 0, p), fmt::format("k_codes/k_scales[{}]", p));
    }
  }
}

}  // namespace

const char* to_string(IndexerLogitsLayout l) { return l == Layout::paged ? "paged" : "ragged"; }

IndexerLogitsLayout indexer_logits_layout_from_string(std::string_view s) {
  if (s == "paged") return Layout::paged;
  if (s == "ragged") return Layout::ragged;
  throw Error(fmt::format("unknown indexer logits layout '{}' (expected paged or ragged)", s));
}

nlohmann::json to_json(const IndexerLogitsShape& s) {
  return {{"layout", to_string(s.layout)}, {"batch", s.batch},           {"next_n", s.next_n},
          {"heads", s.heads},              {"num_blocks", s.num_blocks}, {"block_size", s.block_size},
          {"max_blocks", s.max_blocks},    {"max_context", s.max_context}, {"num_keys", s.num_keys}};
}

IndexerLogitsShape indexer_logits_shape_from_json(const nlohmann::json& j) {
  IndexerLogitsShape s;
  std::string field = "shape";
  try {
    field = "layout";
    s.layout = indexer_logits_layout_from_string(j.at(field).get<std::string>());
    field = "batch";
    s.batch = j.at(field).get<int64_t>();
    field = "next_n";
    s.next_n = j.at(field).get<int>();
    field = "heads";
    s.heads = j.at(field).get<int64_t>();
    field = "num_blocks";
    s.num_blocks = j.at(field).get<int64_t>();
    field = "block_size";
    s.block_size = j.at(field).get<int64_t>();
    field = "max_blocks";
    s.max_blocks = j.at(field).get<int64_t>();
    field = "max_context";
    s.max_context = j.at(field).get<int64_t>();
    field = "num_keys";
    s.num_keys = j.at(field).get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("indexer logits shape: field '{}' is missing or malformed: {}", field, e.what()));
  }
  return s;
}

IndexerLogitsBuffers::IndexerLogitsBuffers(const IndexerLogitsInputs& in)
    : shape(in.shape),
      q(in.q.begin(), in.q.end()),
      weights(in.weights.begin(), in.weights.end()),
      cache(in.cache.begin(), in.cache.end()),
      context_lens(in.context_lens.begin(), in.context_lens.end()),
      block_table(in.block_table.begin(), in.block_table.end()),
      k_codes(in.k_codes.begin(), in.k_codes.end()),
      k_scales(in.k_scales.begin(), in.k_scales.end()),
      ks(in.ks.begin(), in.ks.end()),
      ke(in.ke.begin(), in.ke.end()) {}

void place_paged_keys(IndexerLogitsBuffers& b, std::span<const int64_t> pool,
                      const std::function<void(int64_t seq, int64_t pos, uint8_t* codes, float& scale)>& key) {
  const auto& s = b.shape;
  std::size_t next = 0;
  for (int64_t q = 0; q < s.batch; ++q) {
    const int64_t len = b.context_lens[static_cast<std::size_t>(q)];
    for (int64_t j = 0; j < ceil_div(len, s.block_size); ++j) {
      if (next >= pool.size()) throw Error(fmt::format("place_paged_keys: the pool of {} blocks is used up", pool.size()));
      const int64_t block = pool[next++];
      if (block < 0 || block >= s.num_blocks) {
        throw Error(fmt::format("place_paged_keys: pool entry {} is block {}, outside [0, {})", next - 1, block, s.num_blocks));
      }
      b.block_table[static_cast<std::size_t>(q * s.max_blocks + j)] = static_cast<int32_t>(block);
      for (int64_t o = 0; o < s.block_size && j * s.block_size + o < len; ++o) {
        const int64_t slot = block * s.block_size + o;
        float scale = 0;
        key(q, j * s.block_size + o, b.cache.data() + indexer_code_offset(s.block_size, slot), scale);
        std::memcpy(b.cache.data() + indexer_scale_offset(s.block_size, slot), &scale, sizeof scale);
      }
    }
  }
}

IndexerLogitsInputs IndexerLogitsBuffers::view() const {
  return {shape, q, weights, cache, context_lens, block_table, k_codes, k_scales, ks, ke};
}

IndexerRange indexer_logits_range(const IndexerLogitsInputs& in, int64_t row) {
  const auto& s = in.shape;
  if (s.layout == Layout::paged) {
    const int64_t b = row / s.next_n, i = row % s.next_n;
    const int64_t ctx = in.context_lens[static_cast<std::size_t>(b)];
    return {0, std::max<int64_t>(0, ctx - s.next_n + i + 1)};
  }
  const int64_t b = in.ks[static_cast<std::size_t>(row)], e = in.ke[static_cast<std::size_t>(row)];
  return {b, std::max(b, e)};
}

IndexerKeyRef indexer_logits_key(const IndexerLogitsInputs& in, int64_t row, int64_t p) {
  const auto& s = in.shape;
  if (s.layout == Layout::ragged) {
    return {in.k_codes.data() + p * kIndexerHeadDim, in.k_scales[static_cast<std::size_t>(p)], -1};
  }
  const int64_t b = row / s.next_n;
  const int64_t block = in.block_table[static_cast<std::size_t>(b * s.max_blocks + p / s.block_size)];
  const int64_t slot = block * s.block_size + p % s.block_size;
  IndexerKeyRef k{in.cache.data() + indexer_code_offset(s.block_size, slot), 0, slot};
  std::memcpy(&k.scale, in.cache.data() + indexer_scale_offset(s.block_size, slot), sizeof(float));
  return k;
}

void validate_indexer_logits_inputs(const IndexerLogitsInputs& in, std::string_view who) {
  const auto& s = in.shape;
  const std::string prefix = who.empty() ? std::string() : fmt::format("{}: ", who);
  validate_shape(s, prefix);
  const bool paged = s.layout == Layout::paged;
  const auto expect = [&](const char* what, std::size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      throw Error(fmt::format("{}{} has {} elements, the {} shape needs {}", prefix, what, got, to_string(s.layout), want));
    }
  };
  const int64_t rows = s.rows();
  expect("q (codes)", in.q.size(), rows * s.heads * kIndexerHeadDim);
  expect("weights", in.weights.size(), rows * s.heads);
  expect("cache (bytes)", in.cache.size(), paged ? s.num_blocks * s.block_size * kIndexerTokenBytes : 0);
  expect("context_lens", in.context_lens.size(), paged ? s.batch : 0);
  expect("block_table", in.block_table.size(), paged ? s.batch * s.max_blocks : 0);
  expect("k_codes", in.k_codes.size(), paged ? 0 : s.num_keys * kIndexerHeadDim);
  expect("k_scales", in.k_scales.size(), paged ? 0 : s.num_keys);
  expect("ks", in.ks.size(), paged ? 0 : rows);
  expect("ke", in.ke.size(), paged ? 0 : rows);
  for (int64_t i = 0; i < rows * s.heads * kIndexerHeadDim; ++i) {
    if (e4m3_nan(in.q[static_cast<std::size_t>(i)])) {
      throw Error(fmt::format("{}q[{}, {}, {}] is the e4m3 NaN code 0x{:02x}", prefix, i / (s.heads * kIndexerHeadDim),
                              i / kIndexerHeadDim % s.heads, i % kIndexerHeadDim, in.q[static_cast<std::size_t>(i)]));
    }
  }
  for (int64_t i = 0; i < rows * s.heads; ++i) {
    if (!std::isfinite(in.weights[static_cast<std::size_t>(i)])) {
      throw Error(fmt::format("{}weights[{}, {}] is {}: a head weight must be finite", prefix, i / s.heads, i % s.heads,
                              in.weights[static_cast<std::size_t>(i)]));
    }
  }
  if (paged) {
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t ctx = in.context_lens[static_cast<std::size_t>(b)];
      if (ctx < 0 || ctx > s.max_context) {
        throw Error(fmt::format("{}context_lens[{}] = {} is outside [0, max_context = {}]", prefix, b, ctx, s.max_context));
      }
      if (ceil_div(ctx, s.block_size) > s.max_blocks) {
        throw Error(fmt::format("{}context_lens[{}] = {} needs {} blocks of {}, the block table has max_blocks = {}",
                                prefix, b, ctx, ceil_div(ctx, s.block_size), s.block_size, s.max_blocks));
      }
      for (int64_t j = 0; j < ceil_div(ctx, s.block_size); ++j) {
        const int64_t e = in.block_table[static_cast<std::size_t>(b * s.max_blocks + j)];
        if (e < 0 || e >= s.num_blocks) {
          throw Error(fmt::format("{}block_table[{}, {}] = {} is outside the cache's {} blocks (sequence {} reads it: "
                                  "context_lens {})",
                                  prefix, b, j, e, s.num_blocks, b, ctx));
        }
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = in.ks[static_cast<std::size_t>(r)], e = in.ke[static_cast<std::size_t>(r)];
      if (b < 0 || b > s.num_keys) throw Error(fmt::format("{}ks[{}] = {} is outside [0, num_keys = {}]", prefix, r, b, s.num_keys));
      if (e < 0 || e > s.num_keys) throw Error(fmt::format("{}ke[{}] = {} is outside [0, num_keys = {}]", prefix, r, e, s.num_keys));
    }
  }
  validate_keys(in, prefix);
}

CostModel indexer_logits_cost_model(const IndexerLogitsInputs& in) {
  const auto& s = in.shape;
  const double rows = static_cast<double>(s.rows()), heads = static_cast<double>(s.heads);
  double keys_read = 0, index_bytes = 0, pairs = 0;
  if (s.layout == Layout::paged) {
    const std::size_t n = std::min(static_cast<std::size_t>(std::max<int64_t>(s.batch, 0)), in.context_lens.size());
    for (std::size_t b = 0; b < n; ++b) {
      const int64_t ctx = std::max(0, in.context_lens[b]);
      keys_read += static_cast<double>(ctx);
      index_bytes += 4.0 + 4.0 * static_cast<double>(s.block_size > 0 ? ceil_div(ctx, s.block_size) : 0);
    }
  } else {
    int64_t lo = s.num_keys, hi = 0;
    index_bytes = 8.0 * rows;
    const std::size_t n = std::min({static_cast<std::size_t>(std::max<int64_t>(s.batch, 0)), in.ks.size(), in.ke.size()});
    for (std::size_t r = 0; r < n; ++r) {
      if (in.ke[r] <= in.ks[r]) continue;
      lo = std::min<int64_t>(lo, in.ks[r]);
      hi = std::max<int64_t>(hi, in.ke[r]);
    }
    keys_read = static_cast<double>(std::max<int64_t>(0, hi - lo));
  }
  // The rows whose index arrays are there to read (the model never reads past a short span).
  const int64_t known_rows = s.layout == Layout::paged
                                 ? static_cast<int64_t>(in.context_lens.size()) * std::max(s.next_n, 1)
                                 : static_cast<int64_t>(std::min(in.ks.size(), in.ke.size()));
  for (int64_t r = 0; r < std::min(s.rows(), known_rows); ++r) {
    const auto range = indexer_logits_range(in, r);
    pairs += static_cast<double>(range.end - range.begin);
  }
  CostModel c;
  c.bytes = keys_read * kIndexerTokenBytes + index_bytes + rows * heads * kIndexerHeadDim + rows * heads * 4.0 +
            rows * static_cast<double>(s.cols()) * 4.0;
  c.flops = pairs * (2.0 * heads * kIndexerHeadDim + 3.0 * heads + 1.0);
  return c;
}

std::optional<std::string> IndexerLogitsImpl::check(const IndexerLogitsShape& s) const {
  const auto& i = info();
  if (std::find(i.layouts.begin(), i.layouts.end(), s.layout) == i.layouts.end()) {
    return fmt::format("the {} layout is not one it implements", to_string(s.layout));
  }
  if (s.layout == Layout::paged) {
    if (!i.next_ns.empty() && std::find(i.next_ns.begin(), i.next_ns.end(), s.next_n) == i.next_ns.end()) {
      return fmt::format("next_n={} is not one it claims", s.next_n);
    }
    if (!i.block_sizes.empty() &&
        std::find(i.block_sizes.begin(), i.block_sizes.end(), s.block_size) == i.block_sizes.end()) {
      return fmt::format("block_size={} is not one it claims", s.block_size);
    }
  }
  if (!i.heads.empty() && std::find(i.heads.begin(), i.heads.end(), s.heads) == i.heads.end()) {
    return fmt::format("heads={} is not one it claims", s.heads);
  }
  if (i.max_context > 0 && s.cols() > i.max_context) {
    return fmt::format("a logits row of {} exceeds the widest it takes ({})", s.cols(), i.max_context);
  }
  return std::nullopt;
}

}  // namespace mla
