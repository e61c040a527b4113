// The L2 flush kernel (detail/l2_flush.hpp): a read-only stream over a buffer several times the
// L2, so the lines it leaves in L2 are clean. Why reading and not writing: a write-back L2 keeps
// written lines dirty until they are evicted, so a memset-based flush leaves up to an L2 of dirty
// lines whose write-back to DRAM then happens inside the next timed kernel (by the byte model,
// 60 MB more traffic is 5 % of a b=128 h=16 decode over 8K tokens, 40 % at 1K). Lines filled by
// loads are clean: evicting them costs nothing, so the timed kernel pays only for its own traffic.
#include <cuda_runtime.h>

#include "detail/l2_flush.hpp"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {
namespace {

__global__ void __launch_bounds__(kL2FlushThreads) l2_flush_kernel(const uint4* __restrict__ p, std::size_t n16,
                                                                   unsigned long long never,
                                                                   unsigned long long* __restrict__ sink) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  unsigned long long acc = 0;
  // Four independent loads in flight per thread; __ldcg caches in L2 only, with the default
  // (evict-normal) priority, so the lines replace what the timed kernel left behind (__ldcs, the
  // streaming hint, would mark them evict-first and leave the old lines in place).
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = __ldcg(p + i), b = __ldcg(p + i + stride), c = __ldcg(p + i + 2 * stride),
                d = __ldcg(p + i + 3 * stride);
    acc += a.x ^ b.y ^ c.z ^ d.w;
    acc += a.y + b.z + c.w + d.x;
  }
  for (; i < n16; i += stride) acc += __ldcg(p + i).x;
  // Keeps the loads alive without a store: `never` is chosen by the host so that no sum equals it.
  if (acc == never) *sink = acc;
}

}  // namespace

void l2_flush_read(const void* p, std::size_t bytes, int blocks, unsigned long long never, unsigned long long* sink,
                   cudaStream_t stream) {
  l2_flush_kernel<<<blocks, kL2FlushThreads, 0, stream>>>(static_cast<const uint4*>(p), bytes / 16, never, sink);
  MLA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mla::cuda::detail
