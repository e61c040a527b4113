// Appending tokens to the paged latent cache on the GPU (the write half of MLA decode), in the
// bf16 layout (1152 B/token) or the V3.2 FP8 layout (656 B/token, fixtures/SCHEMA.md).
//
// Per token: kv_norm (RMSNorm, fp32, eps 1e-6 by default, times the weight) on the 512-wide
// latent, interleaved RoPE on the 64-wide k_pe at the token's position (pairs (2i, 2i+1) rotated
// by pos·inv_freq[i]; a half-split RoPE is wrong by O(1), docs/field.md, "Upstream semantics"),
// both rounded to bf16 and written to
// cache[block_table[seq][pos / ps]][pos % ps] = [latent 512 | k_pe 64].
//
// Capacity (docs/field.md, "Upstream semantics": upstream has no sliding window; a single-token
// write past the end is silently dropped there): a position at or past max_seq_len, or one whose
// page the block table does not provide (past max_blocks, or an entry outside [0, num_blocks) such
// as the sentinel), is found on the device, reported through a flag read back after the launch, and
// thrown as mla::CapacityError. The check runs before any write, so a rejected call writes nothing.
//
// FP8: the token is first produced in bf16 exactly as for the bf16 cache, then each block of
// 128 latent values is encoded: scale = max(amax, 1e-4)/448 in float32 (ue8m0: rounded up to a
// power of two), codes e4m3fn(x / scale) rounded to nearest even, saturating at ±448, a NaN
// quotient stored as 0x7F; the rope part stays bf16. Those rules make the bytes a function of the
// bf16 token alone, so with already normalized and roped inputs (AppendInput::normed_roped, the
// stage serving frameworks run on their own normalized kv) the bytes equal core's
// fp8_quantize_token and the goldens' inputs/kv_cache bit for bit. From raw inputs they are that
// encoding of this kernel's own bf16 token, whose fp32 RMSNorm is not bit-reproducible across
// implementations (summation order).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace mla::cuda {

enum class ActivationDType { f32, bf16 };

// Names distinct from mla::CacheFormat / mla::ScaleFmt: those live in C++20 headers that device
// code (C++17) cannot include, and one spelling per meaning avoids silent shadowing in mla::cuda.
enum class AppendCacheFormat { bf16, fp8 };
enum class Fp8ScaleFmt { fp32, ue8m0 };
// raw: pre-norm latent and pre-rope k_pe (kv_norm and RoPE applied here). normed_roped: the final
// token values (rounded to bf16 here if given as f32); kv_norm_weight and inv_freq are unused.
enum class AppendInput { raw, normed_roped };

// All pointers are device memory.
struct CacheAppendArgs {
  int num_tokens = 0;
  ActivationDType dtype = ActivationDType::bf16;  // of latent and k_pe
  const void* latent = nullptr;                   // [num_tokens, 512]
  const void* k_pe = nullptr;                     // [num_tokens, 64], not yet rotated (raw)
  AppendInput input = AppendInput::raw;
  const float* kv_norm_weight = nullptr;          // [512] (bf16 weights widened exactly); raw only
  const double* inv_freq = nullptr;               // [32] fp64 inverse frequencies (YaRN-corrected); raw only
  const int32_t* seq_ids = nullptr;               // [num_tokens] sequence of each token
  const int32_t* positions = nullptr;             // [num_tokens] position of each token
  // Positions must be distinct within a sequence in one call: two writes to one slot race.
  const int32_t* block_table = nullptr;  // [batch, max_blocks]
  int batch = 0;
  int max_blocks = 0;
  int page_size = 0;
  int num_blocks = 0;
  int64_t max_seq_len = 0;      // positions must be < this (and covered by the block table)
  AppendCacheFormat format = AppendCacheFormat::bf16;
  Fp8ScaleFmt scale_fmt = Fp8ScaleFmt::fp32;  // fp8 only
  // bf16: [num_blocks, page_size, 576] bf16 bits; fp8: [num_blocks, page_size, 656] bytes, the
  // base 4-byte aligned (scales and rope pairs are stored as 32-bit words).
  void* kv_cache = nullptr;
  float eps = 1e-6f;
};

// Validates and writes on `stream`, then waits for it. Throws mla::CapacityError for a position
// past capacity (naming the first such token, its sequence and position), mla::Error for a
// malformed argument (null pointer, non-positive size, negative position, sequence id outside
// [0, batch), an enum value out of range, a misaligned fp8 cache) or a CUDA failure.
// num_tokens == 0 does nothing.
void cache_append(const CacheAppendArgs& args, cudaStream_t stream = nullptr);

}  // namespace mla::cuda
