// The cache-append test problem shared by the GPU test and the simulator test: three
// sequences on 16-token pages, a prefill chunk over three pages, a token at max_seq_len - 1,
// inputs from the counter-based generator, and the fp64 expectation of every written slot.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "mla/core/config.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/cache_append.hpp"
#include "mla/judge/append.hpp"
#include "mla/ref/append.hpp"
#include "mla/ref/rope.hpp"

namespace mla::gputest {

using cuda::ActivationDType;

inline constexpr int32_t S = 2147483647;  // sentinel: page not allocated
inline constexpr uint16_t kPoison = 0x7FC0;
inline constexpr double kEps = 1e-6;

// Three sequences on 16-token pages, block table of 4 entries, capacity max_seq_len = 60.
struct AppendSetup {
  int batch = 3, page_size = 16, max_blocks = 4, num_blocks = 12;
  int64_t max_seq_len = 60;
  std::vector<int32_t> block_table = {7, 2, 9, S,    // sequence 0: three pages
                                      0, S, S, S,    // sequence 1: one page
                                      11, 4, 5, 1};  // sequence 2: four pages (64 > max_seq_len)
  std::vector<int32_t> seq_ids, positions;
  std::vector<double> latent, k_pe;  // exact input values, [n, 512] and [n, 64]
  std::vector<double> weight;        // [512], bf16 values
  std::vector<double> inv_freq;      // [32]

  int n() const { return static_cast<int>(seq_ids.size()); }

  // The oracle's (and the judge's) view of the call: the same exact inputs, bf16 cache.
  ref::AppendProblem problem() const {
    ref::AppendProblem p;
    p.num_tokens = n();
    p.latent = latent;
    p.k_pe = k_pe;
    p.kv_norm_weight = weight;
    p.inv_freq = inv_freq;
    p.eps = kEps;
    p.seq_ids = seq_ids;
    p.positions = positions;
    p.block_table = block_table;
    p.batch = batch;
    p.max_blocks = max_blocks;
    p.page_size = page_size;
    p.num_blocks = num_blocks;
    p.max_seq_len = max_seq_len;
    p.format = CacheFormat::bf16;
    return p;
  }
};

inline AppendSetup make_setup(ActivationDType dtype) {
  AppendSetup s;
  std::vector<std::pair<int32_t, int32_t>> toks;
  for (int p = 0; p <= 40; ++p) toks.emplace_back(0, p);  // a prefill chunk over three pages
  toks.emplace_back(1, 15);                               // last slot of a page
  toks.emplace_back(2, 59);                               // max_seq_len - 1: the last valid one
  toks.emplace_back(2, 16);
  toks.emplace_back(2, 17);
  // Launch order unrelated to positions.
  for (int64_t i : gen::permutation(3, 0, static_cast<int64_t>(toks.size()))) {
    s.seq_ids.push_back(toks[static_cast<std::size_t>(i)].first);
    s.positions.push_back(toks[static_cast<std::size_t>(i)].second);
  }
  const std::size_t n = toks.size();
  s.latent.resize(n * 512);
  s.k_pe.resize(n * 64);
  gen::fill_f64(11, 0, 0.0, 1.0, s.latent);
  gen::fill_f64(11, 1, 0.0, 1.0, s.k_pe);
  auto round_to = [&](std::vector<double>& v) {
    for (double& x : v)
      x = dtype == ActivationDType::bf16 ? double{bf16_to_float(bf16_from_double(x))} : double{static_cast<float>(x)};
  };
  round_to(s.latent);
  round_to(s.k_pe);
  s.weight.resize(512);
  gen::fill_f64(11, 2, 1.0, 0.2, s.weight);
  for (double& w : s.weight) w = bf16_to_float(bf16_from_double(w));  // upstream weights are bf16
  s.inv_freq = ref::rope_inv_freq(ModelConfig{});  // V3 defaults: YaRN active
  return s;
}

// The fp64 oracle's value of token i (mla::ref::append_values_f64): y = x / sqrt(mean(x²) + eps)
// · w on the latent, interleaved RoPE on k_pe at the token's position.
inline std::vector<double> expected_token(const AppendSetup& s, int i) {
  const std::vector<double> all = ref::append_values_f64(s.problem());
  return std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(i) * 576, all.begin() + (i + 1) * 576);
}

// A cache with every slot NaN-poisoned (bf16 0x7FC0).
inline std::vector<uint16_t> poisoned_cache(const AppendSetup& s) {
  return std::vector<uint16_t>(static_cast<std::size_t>(s.num_blocks) * s.page_size * 576, kPoison);
}

// A bf16-cache append of the setup's tokens that returned OK, judged by the one append judge as a
// plug-in's append is certified: every value against the fp64 oracle ("cache.append.bf16"), every
// slot no token maps to bit for bit.
inline AppendJudgement judge_bf16_append(const AppendSetup& s, const std::vector<uint16_t>& before,
                                         const std::vector<uint16_t>& after) {
  auto bytes = [](const std::vector<uint16_t>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(uint16_t));
  };
  return judge_append(s.problem(), bytes(before), bytes(after), AppendCall{AppendStatus::ok, "", ""});
}

inline std::size_t slot_of(const AppendSetup& s, int32_t seq, int32_t pos) {
  const int32_t blk = s.block_table[static_cast<std::size_t>(seq * s.max_blocks + pos / s.page_size)];
  return static_cast<std::size_t>(int64_t{blk} * s.page_size + pos % s.page_size);
}

}  // namespace mla::gputest
