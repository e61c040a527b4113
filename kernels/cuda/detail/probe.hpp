// Internal: asks the runtime whether this binary carries code (SASS or PTX) the current device
// can run, by querying the attributes of a trivial kernel compiled with the same flags.
#pragma once

#include <cuda_runtime_api.h>

namespace mla::cuda::detail {
cudaError_t probe_kernel_image();
}
