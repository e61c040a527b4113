#include "mla/cuda/register.hpp"

#include "mla/cuda/attention.hpp"

namespace mla {

void register_cuda_kernels(Registry& registry) {
  registry.add(cuda::make_naive_mha_cublas());
  registry.add(cuda::make_mla_decode());
}

}  // namespace mla
