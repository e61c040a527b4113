// The paged-cache append (the write half of MLA decode) in float64: the oracle every append is
// judged against (mla/judge/append.hpp), and a CPU implementation of it.
//
// Per token: RMSNorm of the 512-wide latent (eps, times the kv_norm weight), interleaved RoPE of
// the 64-wide k_pe at the token's position (pairs (2i, 2i+1); a half-split RoPE is wrong by
// O(1), docs/field.md, "Upstream semantics"), stored at
// block_table[seq][pos / page_size] * page_size + pos % page_size as
//   bf16: [latent 512 | k_pe 64] rounded once to bf16 from float64;
//   fp8:  the latent rounded to bf16 first (as deployed: kv_norm's output is a bf16 tensor), then
//         fp8_quantize_token (per-128 e4m3 blocks, scale per ScaleFmt and Fp8Recipe; k_pe as bf16).
//
// Capacity (upstream has no sliding window: docs/field.md, "Upstream semantics"): a position
// >= max_seq_len, a page index >= max_blocks or a block-table entry outside [0, num_blocks) is
// mla::CapacityError, found for every token before the first write, so a rejected call writes
// nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/core/attention.hpp"

namespace mla::ref {

// One append call, owned. The activations are their exact values, whatever dtype the caller
// feeds the kernel (bf16 in the plug-in ABI, bf16 or fp32 for the CUDA kernel).
struct AppendProblem {
  int64_t num_tokens = 0;
  std::vector<double> latent;          // [n, 512], before kv_norm
  std::vector<double> k_pe;            // [n, 64], before RoPE
  std::vector<double> kv_norm_weight;  // [512]
  std::vector<double> inv_freq;        // [32]
  double eps = 1e-6;
  std::vector<int32_t> seq_ids, positions;  // [n]
  std::vector<int32_t> block_table;         // [batch, max_blocks]
  int64_t batch = 0, max_blocks = 0, page_size = 0, num_blocks = 0;
  int64_t max_seq_len = 0;
  CacheFormat format = CacheFormat::bf16;
  ScaleFmt scale_fmt = ScaleFmt::fp32;  // fp8 only
  Fp8Recipe fp8_recipe = Fp8Recipe::deepseek_v32;  // fp8 only: the scale recipe to write
};

// The first token (in call order) past capacity, or nullopt when every token fits. Assumes the
// problem is otherwise well formed (append_slots checks that).
std::optional<int64_t> first_token_past_capacity(const AppendProblem& p);

// The cache slot of every token. Throws mla::Error on a malformed problem (sizes, a sequence id
// outside [0, batch), a negative position, two tokens on one slot) and mla::CapacityError naming
// the first token past capacity.
std::vector<int64_t> append_slots(const AppendProblem& p);

// The float64 values each token stores before any rounding: [n, 576] = normalized latent |
// roped k_pe. Validates like append_slots.
std::vector<double> append_values_f64(const AppendProblem& p);

// Writes every token into `kv_cache` ([num_blocks, page_size, cache_bytes_per_token]) after the
// whole call has been validated; on any exception nothing has been written.
void cache_append_reference(const AppendProblem& p, std::span<uint8_t> kv_cache);

}  // namespace mla::ref
