// Internal interface of the merge-of-states kernel (merge.cu), shared by its host side
// (merge.cpp) and the warp simulator's test, which runs the same device source on the host.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace mla::cuda::detail {

// The partial and merged outs' element type (the kernel merges bf16 and float32 states).
enum class MergeDType : int32_t { bf16 = 0, f32 = 1 };

// One merge, canonically laid out (mla/core/merge.hpp): outs [tokens, heads, head_dim] of
// `dtype`, lse [heads, tokens] float32, natural log, an infinite lse an empty side.
struct MergeArgs {
  int64_t tokens = 0;
  int32_t heads = 0, head_dim = 0;
  MergeDType dtype = MergeDType::bf16;
  const void* out_a = nullptr;
  const float* lse_a = nullptr;
  const void* out_b = nullptr;
  const float* lse_b = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
};

// Threads of one block; a block merges one (token, head) row.
inline constexpr int kMergeThreads = 128;

// Enqueues the merge on `stream` (nothing for zero rows).
void merge_launch(const MergeArgs& a, cudaStream_t stream);

}  // namespace mla::cuda::detail
