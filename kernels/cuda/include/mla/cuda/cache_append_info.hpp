// What mla::cuda::cache_append (mla/cuda/cache_append.hpp) writes, in the suite's vocabulary. A
// header of its own because cache_append.hpp is shared with device code (C++17), which cannot
// include mla/core's C++20 headers.
#pragma once

#include "mla/core/numeric.hpp"

namespace mla::cuda {

// The FP8 scale recipe of the FP8 append: DeepSeek V3.2's max(amax, 1e-4) / 448, clamping before
// the division (detail/cache_append_kernels.cuh). The tests and the CUDA plug-in read this
// declaration instead of assuming it: goldens of another recipe are not this kernel's to match,
// and the plug-in declares it to the certifier.
inline constexpr Fp8Recipe kCacheAppendFp8Recipe = Fp8Recipe::deepseek_v32;

}  // namespace mla::cuda
