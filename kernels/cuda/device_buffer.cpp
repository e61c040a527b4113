#include "mla/cuda/device_buffer.hpp"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/cuda/check.hpp"

namespace mla::cuda {

DeviceBuffer::DeviceBuffer(std::size_t bytes, bool guarded) : bytes_(bytes), guarded_(guarded) {
  if (bytes == 0 && !guarded) return;
  const std::size_t total = bytes + (guarded ? 2 * kGuardBytes : 0);
  void* p = nullptr;
  MLA_CUDA_CHECK(cudaMalloc(&p, total));
  base_ = static_cast<unsigned char*>(p);
  payload_ = base_ + (guarded ? kGuardBytes : 0);
  if (guarded) {
    try {
      MLA_CUDA_CHECK(cudaMemset(base_, kGuardByte, kGuardBytes));
      MLA_CUDA_CHECK(cudaMemset(base_ + kGuardBytes + bytes, kGuardByte, kGuardBytes));
    } catch (...) {
      release();
      throw;
    }
  }
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      payload_(std::exchange(o.payload_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      guarded_(std::exchange(o.guarded_, false)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    payload_ = std::exchange(o.payload_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    guarded_ = std::exchange(o.guarded_, false);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  // A destructor cannot throw; a failing cudaFree (device already lost) leaves nothing to save.
  if (base_ != nullptr) {
    (void)cudaFree(base_);
    (void)cudaGetLastError();
  }
  base_ = nullptr;
  payload_ = nullptr;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  if (bytes > bytes_)
    throw Error(fmt::format("DeviceBuffer::upload: {} bytes into a buffer of {}", bytes, bytes_));
  if (bytes == 0) return;
  MLA_CUDA_CHECK(cudaMemcpy(payload_, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  if (bytes > bytes_)
    throw Error(fmt::format("DeviceBuffer::download: {} bytes from a buffer of {}", bytes, bytes_));
  if (bytes == 0) return;
  MLA_CUDA_CHECK(cudaMemcpy(host, payload_, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ == 0) return;
  MLA_CUDA_CHECK(cudaMemset(payload_, value, bytes_));
}

std::optional<std::string> DeviceBuffer::guard_damage(const std::string& what) const {
  if (!guarded_ || base_ == nullptr) return std::nullopt;
  std::vector<unsigned char> band(kGuardBytes);
  const struct {
    const unsigned char* at;
    const char* side;
  } bands[] = {{base_, "before"}, {base_ + kGuardBytes + bytes_, "after"}};
  for (const auto& b : bands) {
    MLA_CUDA_CHECK(cudaMemcpy(band.data(), b.at, kGuardBytes, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < kGuardBytes; ++i) {
      if (band[i] != kGuardByte) {
        return fmt::format("guard band {} `{}` ({} bytes) was overwritten: byte {} of the band is "
                           "0x{:02X}, expected 0x{:02X}",
                           b.side, what, bytes_, i, band[i], kGuardByte);
      }
    }
  }
  return std::nullopt;
}

}  // namespace mla::cuda
