#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/ref/append.hpp"
#include "mla/ref/rope.hpp"

namespace mla::ref {
namespace {

constexpr int64_t kLatent = static_cast<int64_t>(kLatentDim), kRope = static_cast<int64_t>(kRopeDim);

void expect_size(const char* what, std::size_t have, int64_t want) {
  if (want < 0 || have != static_cast<std::size_t>(want)) {
    throw Error(fmt::format("append: {} has {} elements, the problem needs {}", what, have, want));
  }
}

}  // namespace

std::vector<int64_t> append_slots(const AppendProblem& p) {
  if (p.num_tokens < 0) throw Error(fmt::format("append: num_tokens {} is negative", p.num_tokens));
  if (p.batch < 1 || p.max_blocks < 1 || p.page_size < 1 || p.num_blocks < 1 || p.max_seq_len < 0) {
    throw Error(fmt::format("append: batch {}, max_blocks {}, page_size {}, num_blocks {} must be positive and "
                            "max_seq_len {} not negative",
                            p.batch, p.max_blocks, p.page_size, p.num_blocks, p.max_seq_len));
  }
  if (!(p.eps >= 0) || !std::isfinite(p.eps)) throw Error(fmt::format("append: eps {} is not a finite value >= 0", p.eps));
  expect_size("latent", p.latent.size(), p.num_tokens * kLatent);
  expect_size("k_pe", p.k_pe.size(), p.num_tokens * kRope);
  expect_size("kv_norm_weight", p.kv_norm_weight.size(), kLatent);
  expect_size("inv_freq", p.inv_freq.size(), kRope / 2);
  expect_size("seq_ids", p.seq_ids.size(), p.num_tokens);
  expect_size("positions", p.positions.size(), p.num_tokens);
  expect_size("block_table", p.block_table.size(), p.batch * p.max_blocks);
  std::vector<int64_t> slots(static_cast<std::size_t>(p.num_tokens));
  std::set<std::pair<int32_t, int32_t>> seen;
  for (int64_t i = 0; i < p.num_tokens; ++i) {
    const int32_t seq = p.seq_ids[static_cast<std::size_t>(i)], pos = p.positions[static_cast<std::size_t>(i)];
    if (seq < 0 || seq >= p.batch) throw Error(fmt::format("append: token {} has sequence id {} outside [0, {})", i, seq, p.batch));
    if (pos < 0) throw Error(fmt::format("append: token {} (sequence {}) has negative position {}", i, seq, pos));
    if (!seen.insert({seq, pos}).second) {
      throw Error(fmt::format("append: token {} writes sequence {} position {} a second time in one call", i, seq, pos));
    }
    const int64_t page = pos / p.page_size;
    // The capacity rules, in the order first_token_past_capacity() applies them.
    if (pos >= p.max_seq_len) {
      throw CapacityError(fmt::format("cache capacity exceeded: token {} of sequence {} at position {} >= max_seq_len {}",
                                      i, seq, pos, p.max_seq_len));
    }
    if (page >= p.max_blocks) {
      throw CapacityError(fmt::format("cache capacity exceeded: token {} of sequence {} at position {} needs page {} "
                                      "but the block table has {} entries",
                                      i, seq, pos, page, p.max_blocks));
    }
    const int32_t block = p.block_table[static_cast<std::size_t>(seq * p.max_blocks + page)];
    if (block < 0 || block >= p.num_blocks) {
      throw CapacityError(fmt::format("cache capacity exceeded: token {} of sequence {} at position {}: page {} maps to "
                                      "block {}, outside [0, {})",
                                      i, seq, pos, page, block, p.num_blocks));
    }
    slots[static_cast<std::size_t>(i)] = int64_t{block} * p.page_size + pos % p.page_size;
  }
  return slots;
}

std::optional<int64_t> first_token_past_capacity(const AppendProblem& p) {
  for (int64_t i = 0; i < p.num_tokens; ++i) {
    const int64_t seq = p.seq_ids[static_cast<std::size_t>(i)], pos = p.positions[static_cast<std::size_t>(i)];
    const int64_t page = pos / p.page_size;
    if (pos >= p.max_seq_len || page >= p.max_blocks) return i;
    const int32_t block = p.block_table[static_cast<std::size_t>(seq * p.max_blocks + page)];
    if (block < 0 || block >= p.num_blocks) return i;
  }
  return std::nullopt;
}

std::vector<double> append_values_f64(const AppendProblem& p) {
  (void)append_slots(p);
  std::vector<double> out(static_cast<std::size_t>(p.num_tokens * (kLatent + kRope)));
  for (int64_t i = 0; i < p.num_tokens; ++i) {
    double* o = out.data() + i * (kLatent + kRope);
    const double* x = p.latent.data() + i * kLatent;
    double ss = 0;
    for (int64_t j = 0; j < kLatent; ++j) ss += x[j] * x[j];
    const double inv_rms = 1.0 / std::sqrt(ss / static_cast<double>(kLatent) + p.eps);
    for (int64_t j = 0; j < kLatent; ++j) o[j] = x[j] * inv_rms * p.kv_norm_weight[static_cast<std::size_t>(j)];
    const double* pe = p.k_pe.data() + i * kRope;
    std::copy(pe, pe + kRope, o + kLatent);
    apply_rope({o + kLatent, static_cast<std::size_t>(kRope)}, p.positions[static_cast<std::size_t>(i)], p.inv_freq);
  }
  return out;
}

void cache_append_reference(const AppendProblem& p, std::span<uint8_t> kv_cache) {
  const auto slots = append_slots(p);
  const std::size_t bpt = cache_bytes_per_token(p.format);
  expect_size("kv_cache (bytes)", kv_cache.size(), p.num_blocks * p.page_size * static_cast<int64_t>(bpt));
  const auto values = append_values_f64(p);
  std::vector<uint8_t> token(bpt);
  for (int64_t i = 0; i < p.num_tokens; ++i) {
    const double* v = values.data() + i * (kLatent + kRope);
    if (p.format == CacheFormat::bf16) {
      for (int64_t j = 0; j < kLatent + kRope; ++j) {
        const uint16_t b = bf16_from_double(v[j]);
        std::memcpy(token.data() + 2 * j, &b, 2);
      }
    } else {
      std::vector<double> latent(v, v + kLatent);
      for (double& x : latent) x = bf16_to_float(bf16_from_double(x));
      fp8_quantize_token(latent, std::span<const double>(v + kLatent, static_cast<std::size_t>(kRope)), p.scale_fmt, token,
                         p.fp8_recipe);
    }
    std::memcpy(kv_cache.data() + slots[static_cast<std::size_t>(i)] * static_cast<int64_t>(bpt), token.data(), bpt);
  }
}

}  // namespace mla::ref
