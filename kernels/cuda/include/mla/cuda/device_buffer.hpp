// An owning device allocation with optional guard regions on both sides.
//
// Why guards: a kernel that writes one row or one element too far (padded head tiles, a combine
// indexing the wrong split) corrupts a neighbouring allocation silently. Output buffers are
// allocated with a guard band before and after, filled with a known byte; `guard_damage` reads
// both bands back and names the first changed byte, so results() can refuse an out-of-bounds
// write instead of reporting numbers that happened to be right.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

namespace mla::cuda {

class DeviceBuffer {
 public:
  static constexpr std::size_t kGuardBytes = 256;  // keeps the payload 256-byte aligned
  static constexpr unsigned char kGuardByte = 0xA5;

  DeviceBuffer() = default;
  // Allocates `bytes` (nothing for 0). With `guarded`, kGuardBytes on each side are filled with
  // kGuardByte. Throws mla::Error (via MLA_CUDA_CHECK) when the allocation fails.
  explicit DeviceBuffer(std::size_t bytes, bool guarded = false);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return payload_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(payload_);
  }
  std::size_t size() const { return bytes_; }

  // Synchronous copies of the whole payload (or `bytes` of it).
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  // Sets every payload byte to `value` (synchronous).
  void fill_bytes(unsigned char value);

  // Reads both guard bands back (synchronous) and describes the first damaged byte, naming
  // `what`; nullopt when intact or when unguarded.
  std::optional<std::string> guard_damage(const std::string& what) const;

 private:
  void release() noexcept;
  unsigned char* base_ = nullptr;
  void* payload_ = nullptr;
  std::size_t bytes_ = 0;
  bool guarded_ = false;
};

}  // namespace mla::cuda
