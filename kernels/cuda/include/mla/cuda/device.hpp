// Whether this process can run the CUDA kernels, and the properties of the device it would use.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace mla::cuda {

// The kernels use cp.async, ldmatrix and bf16 mma.sync: Ampere and later.
inline constexpr int kMinComputeMajor = 8;

struct DeviceInfo {
  int device = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t smem_per_block_optin = 0;  // the most dynamic shared memory one block may opt into
  std::size_t total_memory = 0;
};

// Why no CUDA kernel can run in this process (no driver, no device, a device older than sm_80,
// a binary without code for the device), or nullopt. Never throws: ANY error from the runtime
// counts as "no GPU": every binary must start, and skip with the reason, on a machine without a
// driver (CI has none).
// Decided once per process, for the device current at the first call.
std::optional<std::string> unavailable_reason();

// Properties of that device; throws mla::Error with the reason when unavailable_reason() is set.
const DeviceInfo& current_device();

}  // namespace mla::cuda
