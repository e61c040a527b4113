#include "detail/probe.hpp"

namespace mla::cuda::detail {
namespace {
__global__ void probe_kernel(int* p) {
  if (p != nullptr) *p = 0;
}
}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, probe_kernel);
}

}  // namespace mla::cuda::detail
