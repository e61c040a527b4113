// Launcher of the merge-of-states kernel (detail/merge_kernels.cuh).
#include <cuda_runtime.h>

#include "detail/merge_kernels.cuh"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {

void merge_launch(const MergeArgs& a, cudaStream_t stream) {
  const int64_t rows = a.tokens * a.heads;
  if (rows == 0) return;
  merge::merge_kernel<<<static_cast<unsigned>(rows), kMergeThreads, 0, stream>>>(a);
  MLA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mla::cuda::detail
