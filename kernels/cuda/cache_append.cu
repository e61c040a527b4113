// Launchers of the paged-cache append kernels (detail/cache_append_kernels.cuh).
#include <cuda_runtime.h>

#include "detail/cache_append_kernels.cuh"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {

void cache_append_launch(const CacheAppendArgs& a, int* flag, cudaStream_t stream) {
  const unsigned check_blocks = static_cast<unsigned>((a.num_tokens + 127) / 128);
  append::append_check_kernel<<<check_blocks, 128, 0, stream>>>(a, flag);
  MLA_CUDA_CHECK(cudaGetLastError());
  const unsigned write_blocks =
      static_cast<unsigned>((a.num_tokens + append::kTokensPerBlock - 1) / append::kTokensPerBlock);
  append::append_write_kernel<append::Fp8Defect::none>
      <<<write_blocks, 32 * append::kTokensPerBlock, 0, stream>>>(a, flag);
  MLA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mla::cuda::detail
