// Internal interface of the cache-append kernels (cache_append.cu).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "mla/cuda/cache_append.hpp"

namespace mla::cuda::detail {

// Codes OR-ed into flag[0] by the check kernel; flag[1] receives the smallest offending token.
inline constexpr int kAppendBadArgument = 1;  // sequence id outside [0, batch) or negative position
inline constexpr int kAppendPastMaxSeqLen = 2;
inline constexpr int kAppendPastBlockTable = 4;  // page index >= max_blocks
inline constexpr int kAppendPageMissing = 8;     // block-table entry outside [0, num_blocks)

// Launches the check kernel then the write kernel (which does nothing when flag[0] != 0) on
// `stream`. `flag` is device memory, 2 ints, initialised by the caller to {0, INT_MAX}.
void cache_append_launch(const CacheAppendArgs& a, int* flag, cudaStream_t stream);

}  // namespace mla::cuda::detail
