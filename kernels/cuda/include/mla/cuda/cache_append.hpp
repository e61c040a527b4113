// Appending tokens to the paged bf16 latent cache on the GPU (the write half of MLA decode).
//
// Per token: kv_norm (RMSNorm, fp32, eps 1e-6 by default, times the weight) on the 512-wide
// latent, interleaved RoPE on the 64-wide k_pe at the token's position (pairs (2i, 2i+1) rotated
// by pos·inv_freq[i]; a half-split RoPE is wrong by O(1), FIELD-NOTES), both rounded to bf16 and
// written to cache[block_table[seq][pos / ps]][pos % ps] = [latent 512 | k_pe 64].
//
// Capacity (FIELD-NOTES: upstream has no sliding window; a single-token write past the end is
// silently dropped there): a position at or past max_seq_len, or one whose page the block table
// does not provide (past max_blocks, or an entry outside [0, num_blocks) such as the sentinel),
// is found on the device, reported through a flag read back after the launch, and thrown as
// mla::CapacityError. The check runs before any write, so a rejected call writes nothing.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace mla::cuda {

enum class ActivationDType { f32, bf16 };

// All pointers are device memory.
struct CacheAppendArgs {
  int num_tokens = 0;
  ActivationDType dtype = ActivationDType::bf16;  // of latent and k_pe
  const void* latent = nullptr;                   // [num_tokens, 512]
  const void* k_pe = nullptr;                     // [num_tokens, 64], not yet rotated
  const float* kv_norm_weight = nullptr;          // [512] (bf16 weights widened exactly)
  const double* inv_freq = nullptr;               // [32] fp64 inverse frequencies (YaRN-corrected)
  const int32_t* seq_ids = nullptr;               // [num_tokens] sequence of each token
  const int32_t* positions = nullptr;             // [num_tokens] position of each token
  // Positions must be distinct within a sequence in one call: two writes to one slot race.
  const int32_t* block_table = nullptr;  // [batch, max_blocks]
  int batch = 0;
  int max_blocks = 0;
  int page_size = 0;
  int num_blocks = 0;
  int64_t max_seq_len = 0;      // positions must be < this (and covered by the block table)
  uint16_t* kv_cache = nullptr;  // [num_blocks, page_size, 576] bf16 bits
  float eps = 1e-6f;
};

// Validates and writes on `stream`, then waits for it. Throws mla::CapacityError for a position
// past capacity (naming the first such token, its sequence and position), mla::Error for a
// malformed argument (null pointer, non-positive size, negative position, sequence id outside
// [0, batch)) or a CUDA failure. num_tokens == 0 does nothing.
void cache_append(const CacheAppendArgs& args, cudaStream_t stream = nullptr);

}  // namespace mla::cuda
