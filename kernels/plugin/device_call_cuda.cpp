// Compiled only with CUDA (MLA_HAVE_CUDA); links the CUDA runtime alone, never libcuda, so the
// host still starts on a machine without a driver and reports such plug-ins SKIPPED.
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "device_call.hpp"
#include "mla/core/error.hpp"
#include "mla/core/sha256.hpp"
#include "mla/plugin/host.hpp"

namespace mla::plugin::detail {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

std::string digest(std::span<const uint8_t> v) { return sha256_hex(v); }

// Guard regions of 64 KiB: device memory has no inaccessible pages, so only the canaries can
// show a write past a buffer, and they must reach as far as a stray row or block could.
constexpr std::size_t kGuard = 64 * 1024;

}  // namespace

std::optional<std::string> device_unavailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return fmt::format("no CUDA device to give the plug-in device memory (cudaGetDeviceCount: {}: {})",
                       cudaGetErrorName(e), cudaGetErrorString(e));
  }
  if (n == 0) return std::string("no CUDA device to give the plug-in device memory (cudaGetDeviceCount found 0)");
  return std::nullopt;
}

struct DeviceCall::Impl {
  struct Buffer {
    std::string name;
    Role role;
    std::size_t bytes = 0;
    uint8_t* base = nullptr;  // [guard | data | guard]
    std::string digest_before;
    std::vector<uint8_t> result;
  };
  std::vector<Buffer> buffers;
  cudaStream_t stream = nullptr;
  std::vector<uint8_t> front, back;  // the canaries as they must read afterwards

  ~Impl() {
    if (stream) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
    }
    for (auto& b : buffers) (void)cudaFree(b.base);
  }
};

DeviceCall::DeviceCall() : impl_(std::make_unique<Impl>()) {
  if (auto why = device_unavailable()) throw Error(*why);
  check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  impl_->front.resize(kGuard);
  impl_->back.resize(kGuard);
  // The front canary runs backwards from the data: offset i is i bytes away, as in the back one.
  for (std::size_t i = 0; i < kGuard; ++i) {
    impl_->front[kGuard - 1 - i] = canary_byte(i);
    impl_->back[i] = canary_byte(i);
  }
}

DeviceCall::~DeviceCall() = default;

void* DeviceCall::add(std::string name, std::span<const uint8_t> initial, Role role) {
  Impl::Buffer b;
  b.name = std::move(name);
  b.role = role;
  b.bytes = initial.size();
  void* p = nullptr;
  check(cudaMalloc(&p, b.bytes + 2 * kGuard), "cudaMalloc");
  b.base = static_cast<uint8_t*>(p);
  impl_->buffers.push_back(b);  // owned (and freed) from here on
  auto& mine = impl_->buffers.back();
  check(cudaMemcpy(mine.base, impl_->front.data(), kGuard, cudaMemcpyHostToDevice), "cudaMemcpy (guard)");
  if (mine.bytes) check(cudaMemcpy(mine.base + kGuard, initial.data(), mine.bytes, cudaMemcpyHostToDevice), "cudaMemcpy (data)");
  check(cudaMemcpy(mine.base + kGuard + mine.bytes, impl_->back.data(), kGuard, cudaMemcpyHostToDevice), "cudaMemcpy (guard)");
  if (role == Role::input) mine.digest_before = digest(initial);
  return mine.base + kGuard;
}

void* DeviceCall::stream() const { return impl_->stream; }

std::vector<std::string> DeviceCall::finish() {
  // The plug-in's work is on our stream; the copies above were synchronous, so the stream and
  // the device are all there is to wait for.
  check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize after the plug-in's call");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the plug-in's call");
  std::vector<std::string> violations;
  std::vector<uint8_t> guard(kGuard);
  for (auto& b : impl_->buffers) {
    b.result.resize(b.bytes);
    if (b.bytes) check(cudaMemcpy(b.result.data(), b.base + kGuard, b.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (result)");
    if (b.role == Role::input) {
      const auto now = digest(b.result);
      if (now != b.digest_before) {
        violations.push_back(fmt::format("input {} changed on the device (sha256 {}... became {}...)", b.name,
                                         b.digest_before.substr(0, 12), now.substr(0, 12)));
      }
    }
    check(cudaMemcpy(guard.data(), b.base, kGuard, cudaMemcpyDeviceToHost), "cudaMemcpy (guard)");
    for (std::size_t i = 0; i < kGuard; ++i) {
      if (guard[i] != impl_->front[i]) {
        violations.push_back(fmt::format("wrote {} bytes before {}", kGuard - i, b.name));
        break;
      }
    }
    check(cudaMemcpy(guard.data(), b.base + kGuard + b.bytes, kGuard, cudaMemcpyDeviceToHost), "cudaMemcpy (guard)");
    for (std::size_t i = kGuard; i-- > 0;) {
      if (guard[i] != impl_->back[i]) {
        violations.push_back(fmt::format("wrote {} bytes past {}", i + 1, b.name));
        break;
      }
    }
  }
  return violations;
}

const std::vector<uint8_t>& DeviceCall::result(std::size_t index) const { return impl_->buffers.at(index).result; }

}  // namespace mla::plugin::detail
