// Internal interface between the MLA decode host code (mla_decode.cpp, C++20) and its device
// code (mla_decode.cu, C++17): plain pointers and integers only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "mla/cuda/split_plan.hpp"

namespace mla::cuda::detail {

inline constexpr int kDecodeTileTokens = 32;  // key tokens per main-loop step

// Query rows per thread block for the kernel instance chosen for `rows` query rows per work
// sequence (dense: s_q·heads; sparse: heads): 16, 32 or 64 (one 16-row MMA tile per pair of
// warps).
int decode_tile_rows(int64_t rows);

// Which kernel instance: the row tile, the cache format and dense or sparse.
struct DecodeVariant {
  int tile_rows = 64;
  bool fp8 = false;     // 656-byte FP8 tokens dequantized in shared memory
  bool sparse = false;  // top-k index lists; sequences are (b, s) pairs, rows are heads
};

struct DecodeParams {
  const uint16_t* q = nullptr;           // [b, s_q, h, 576] bf16 bits
  const uint16_t* cache = nullptr;       // [nb, ps, 576] bf16 bits (bf16 cache)
  const uint8_t* cache8 = nullptr;       // [nb, ps, 656] FP8 tokens (fp8 cache)
  const int32_t* block_table = nullptr;  // [b, mb]
  const int32_t* seqlens = nullptr;      // [b]
  const int32_t* indices = nullptr;      // sparse: [b, s_q, topk] logical positions
  const DecodeWork* work = nullptr;      // [num_work]
  const int32_t* num_splits = nullptr;   // [batch]
  const int32_t* split_base = nullptr;   // [batch]
  int64_t num_work = 0;
  // The planned problem: dense, the caller's (b, s_q, h); sparse, b·s_q sequences of s_q = 1.
  int batch = 0, s_q = 0, heads = 0, page_size = 0, max_blocks = 0;
  int seq_q = 0;  // the caller's s_q: the lse layout [b, h, s_q] and sparse's sequence b = vb / seq_q
  int topk = 0;   // sparse: index-list length (the planned "sequence length")
  int causal = 1;  // dense only; sparse attends exactly the valid indices
  float scale_log2 = 0.f;  // softmax_scale · log2(e): the kernel works with exp2
  uint16_t* out = nullptr;  // [b, s_q, h, 512] bf16 bits
  float* lse = nullptr;     // [b, h, s_q], natural log
  float* ws_out = nullptr;  // [slots, rows, 512] fp32 partial outputs (normalized per split)
  float* ws_lse = nullptr;  // [slots, rows] natural-log partial lse, -inf for an empty split
  int64_t combine_blocks = 0;
  int combine_rows_per_block = 4;
};

// Dynamic shared memory of the decode kernel instance.
std::size_t decode_smem_bytes(const DecodeVariant& v);
// Opts the kernel instance into its shared memory and returns how many of its blocks fit on one
// SM (>= 1), or throws mla::Error / UnsupportedError when the device cannot run it.
int decode_configure(const DecodeVariant& v, std::size_t smem_optin);
// Launches the decode kernel instance (grid = num_work) and, when combine_blocks > 0, the
// combine kernel, on `stream`. Throws mla::Error on a launch error.
void decode_launch(const DecodeParams& p, const DecodeVariant& v, cudaStream_t stream);

}  // namespace mla::cuda::detail
