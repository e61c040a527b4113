// Registration of the CUDA attention kernels (called by register_builtin_kernels).
#pragma once

#include "mla/kernels/registry.hpp"

namespace mla {

// Adds `cuda_naive_mha_cublas` and `cuda_mla_decode`. They register on every machine; on one
// without a usable GPU their unavailable() says why and callers skip them.
void register_cuda_kernels(Registry& registry);

}  // namespace mla
