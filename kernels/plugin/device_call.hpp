// Device memory for plug-ins that ask for it (MLA_PLUGIN_FLAG_DEVICE_MEMORY): the host's side of
// a call with CUDA device pointers and a stream. The CUDA code lives in device_call_cuda.cpp,
// compiled only when the suite is built with CUDA; device_call_none.cpp stands in otherwise, so
// `mla certify` builds and runs without a CUDA toolkit (such plug-ins are then SKIPPED).
// Private to mla_plugin_host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mla::plugin::detail {

// nullopt when this host can give a plug-in device memory here, else why not (no CUDA in this
// build, no driver, no device): the plug-in's cases are SKIPPED with it.
std::optional<std::string> device_unavailable();

// One call's buffers on the current device, each between two guard regions filled with
// canary_byte(), and a stream created with cudaStreamNonBlocking. Throws mla::Error naming the
// CUDA call that failed.
class DeviceCall {
 public:
  enum class Role { input, output, inout };
  DeviceCall();
  ~DeviceCall();
  DeviceCall(const DeviceCall&) = delete;
  DeviceCall& operator=(const DeviceCall&) = delete;

  // Copies `initial` (the input, or an output's unwritten pattern) to a fresh device buffer and
  // returns its device address (never null, even for 0 bytes).
  void* add(std::string name, std::span<const uint8_t> initial, Role role);
  void* stream() const;
  // Synchronizes the stream, copies outputs back and audits: an input whose device copy changed
  // (sha256 before/after) or a changed guard byte is a violation, worded like the host-memory
  // audit's. Throws mla::Error on a CUDA error (a plug-in's asynchronous fault shows up here).
  std::vector<std::string> finish();
  // After finish(): the bytes of buffer `index` (in add() order) as the device held them.
  const std::vector<uint8_t>& result(std::size_t index) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mla::plugin::detail
