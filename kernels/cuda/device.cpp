#include "mla/cuda/device.hpp"

#include <fmt/format.h>

#include <cuda_runtime_api.h>

#include "detail/probe.hpp"
#include "mla/core/error.hpp"

namespace mla::cuda {
namespace {

struct Probe {
  std::optional<std::string> reason;
  DeviceInfo info;
};

std::string describe(const char* what, cudaError_t err) {
  return fmt::format("{} failed: {} ({})", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

Probe probe() {
  Probe p;
  auto fail = [&](std::string why) {
    (void)cudaGetLastError();  // leave no recorded error behind for later, unrelated checks
    p.reason = "CUDA unavailable: " + std::move(why);
    return p;
  };
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess)
    return fail(describe("cudaGetDeviceCount", err));
  if (count <= 0) return fail("no CUDA device");
  int dev = 0;
  if (const cudaError_t err = cudaGetDevice(&dev); err != cudaSuccess)
    return fail(describe("cudaGetDevice", err));
  cudaDeviceProp prop{};
  if (const cudaError_t err = cudaGetDeviceProperties(&prop, dev); err != cudaSuccess)
    return fail(describe("cudaGetDeviceProperties", err));
  p.info.device = dev;
  p.info.name = prop.name;
  p.info.cc_major = prop.major;
  p.info.cc_minor = prop.minor;
  p.info.sm_count = prop.multiProcessorCount;
  p.info.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  p.info.total_memory = prop.totalGlobalMem;
  if (prop.major < kMinComputeMajor)
    return fail(fmt::format("device {} '{}' is sm_{}{}; the kernels need sm_{}0 or newer (cp.async, "
                            "ldmatrix, bf16 mma.sync)",
                            dev, prop.name, prop.major, prop.minor, kMinComputeMajor));
  if (const cudaError_t err = detail::probe_kernel_image(); err != cudaSuccess)
    return fail(fmt::format("this binary has no code for device {} '{}' (sm_{}{}): {}; rebuild with "
                            "MLA_CUDA_ARCHITECTURES including it",
                            dev, prop.name, prop.major, prop.minor,
                            describe("cudaFuncGetAttributes", err)));
  return p;
}

const Probe& cached() {
  static const Probe p = probe();
  return p;
}

}  // namespace

std::optional<std::string> unavailable_reason() { return cached().reason; }

const DeviceInfo& current_device() {
  const Probe& p = cached();
  if (p.reason) throw Error(*p.reason);
  return p.info;
}

}  // namespace mla::cuda
