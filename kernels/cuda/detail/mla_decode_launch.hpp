// Internal interface between the MLA decode host code (mla_decode.cpp, C++20) and its device
// code (mla_decode.cu, C++17): plain pointers and integers only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "mla/cuda/split_plan.hpp"

namespace mla::cuda::detail {

inline constexpr int kDecodeTileTokens = 32;  // key tokens per main-loop step

// Query rows per thread block for the kernel instance chosen for `rows` = s_q·heads rows per
// sequence: 16, 32 or 64 (one 16-row MMA tile per pair of warps).
int decode_tile_rows(int64_t rows);

struct DecodeParams {
  const uint16_t* q = nullptr;           // [b, s_q, h, 576] bf16 bits
  const uint16_t* cache = nullptr;       // [nb, ps, 576] bf16 bits
  const int32_t* block_table = nullptr;  // [b, mb]
  const int32_t* seqlens = nullptr;      // [b]
  const DecodeWork* work = nullptr;      // [num_work]
  const int32_t* num_splits = nullptr;   // [b]
  const int32_t* split_base = nullptr;   // [b]
  int64_t num_work = 0;
  int batch = 0, s_q = 0, heads = 0, page_size = 0, max_blocks = 0;
  int causal = 1;
  float scale_log2 = 0.f;  // softmax_scale · log2(e): the kernel works with exp2
  uint16_t* out = nullptr;  // [b, s_q, h, 512] bf16 bits
  float* lse = nullptr;     // [b, h, s_q], natural log
  float* ws_out = nullptr;  // [slots, rows, 512] fp32 partial outputs (normalized per split)
  float* ws_lse = nullptr;  // [slots, rows] natural-log partial lse, -inf for an empty split
  int64_t combine_blocks = 0;
  int combine_rows_per_block = 4;
};

// Dynamic shared memory of the decode kernel for a row tile.
std::size_t decode_smem_bytes(int tile_rows);
// Opts the kernel instance into its shared memory and returns how many of its blocks fit on one
// SM (>= 1), or throws mla::Error / UnsupportedError when the device cannot run it.
int decode_configure(int tile_rows, std::size_t smem_optin);
// Launches the decode kernel (grid = num_work) and, when combine_blocks > 0, the combine kernel,
// on `stream`. Throws mla::Error on a launch error.
void decode_launch(const DecodeParams& p, int tile_rows, cudaStream_t stream);

}  // namespace mla::cuda::detail
