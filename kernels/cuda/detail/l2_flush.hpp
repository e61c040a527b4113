// Internal: the L2 flush kernel behind mla::cuda::L2Flusher (timing.cpp), compiled by nvcc in
// l2_flush.cu.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace mla::cuda::detail {

// Enqueues one read of `bytes` (a multiple of 16) at `p` on `stream` with `blocks` blocks of
// kL2FlushThreads threads: 16-byte loads that allocate in L2 with the normal eviction priority
// and bypass L1 (ld.global.cg), no store (the only one is guarded by a sum that never equals
// `never`, and `sink` is never written in practice). Throws mla::Error on a launch error.
inline constexpr int kL2FlushThreads = 512;
void l2_flush_read(const void* p, std::size_t bytes, int blocks, unsigned long long never,
                   unsigned long long* sink, cudaStream_t stream);

}  // namespace mla::cuda::detail
