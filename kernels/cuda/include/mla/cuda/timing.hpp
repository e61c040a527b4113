// Device-side timing: CUDA-event timers, an L2 flush between timed calls, and a snapshot of the
// GPU's identity, driver and clocks for benchmark context.
//
// Why events and not a host clock: a host clock around "launch + synchronize" adds launch and
// wake-up latency (several microseconds) to every call, which is 10-25% of a memory-bound decode
// at 1K tokens. Events are stamped by the GPU when the stream reaches them, so they bracket exactly
// the work enqueued between them (time only the kernels: docs/field.md, "Measurement practice").
//
// Why an L2 flush: a decode kernel timed back to back finds part of its cache in the 50-60 MB L2
// left by the previous call and reports a bandwidth no cold call reaches. Writing a buffer of
// twice the L2 between calls evicts it (docs/field.md, "Measurement practice").
//
// C++17 and free of the C++20 interface headers, so .cu files and C++17 tools can include it.
// Nothing here needs a GPU to be constructed lazily: every class that touches the device checks
// `mla::cuda::unavailable_reason()` first and throws mla::Error with that reason.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "mla/cuda/device_buffer.hpp"

namespace mla::cuda {

// Throws mla::Error("<what>: <reason>") when no CUDA kernel can run in this process.
void require_device(const char* what);

// Two CUDA events on one stream. start()/stop() enqueue them; elapsed_ms() waits for the stop
// event and returns the GPU time between them. Misuse (elapsed before both events, stop before
// start) is an mla::Error, not a garbage number.
class EventTimer {
 public:
  EventTimer();  // requires a device (see require_device)
  ~EventTimer();
  EventTimer(EventTimer&& o) noexcept;
  EventTimer& operator=(EventTimer&& o) noexcept;
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(cudaStream_t stream);
  void stop(cudaStream_t stream);
  // Blocks until the stop event completes; milliseconds between the two events (resolution
  // about 0.5 us per the CUDA documentation).
  float elapsed_ms();

 private:
  void release() noexcept;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  enum class State { idle, started, stopped } state_ = State::idle;
};

// Evicts the device L2 by writing a buffer of `bytes` (cudaMemsetAsync: the write allocates every
// line in L2, pushing out what a timed kernel would otherwise find there).
class L2Flusher {
 public:
  // bytes == 0: twice the current device's L2 (cudaDevAttrL2CacheSize), at least 32 MiB.
  explicit L2Flusher(std::size_t bytes = 0);
  // Enqueues the flush on `stream`, so it is ordered before whatever is enqueued next there.
  void flush(cudaStream_t stream);
  std::size_t bytes() const { return buf_.size(); }
  // The L2 size the default was derived from (0 if `bytes` was given).
  std::size_t l2_bytes() const { return l2_; }

 private:
  DeviceBuffer buf_;
  std::size_t l2_ = 0;
  unsigned char next_ = 0;  // alternates, so consecutive flushes never write identical bytes
};

// Implemented by a prepared CUDA implementation whose run() enqueues all of its device work on
// one stream and nothing on any other: a benchmark can then enqueue an L2 flush and a start event
// on that stream before run() and a stop event after it, and time exactly that work. An
// implementation that does not implement it can still be timed, but only by a host clock around
// run() + synchronize() (launch latency included), and the benchmark says so in its label.
class StreamBound {
 public:
  virtual ~StreamBound() = default;
  virtual cudaStream_t stream() const = 0;
};

// Identity, limits and current state of the GPU the kernels use. Filled as far as possible on
// any machine: without a device `available` is false and `unavailable` says why; without NVML
// (libnvidia-ml.so.1 is loaded at run time, never linked, so binaries start without a driver)
// the driver string and clocks are empty and `nvml_status` says why.
struct GpuSnapshot {
  bool available = false;
  std::string unavailable;  // why not, when !available
  int device = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  std::size_t memory_bytes = 0;
  int memory_bus_bits = 0;
  int max_sm_clock_mhz = 0;   // cudaDevAttrClockRate
  int max_mem_clock_mhz = 0;  // cudaDevAttrMemoryClockRate
  std::string pci_bus_id;
  int cuda_driver_api = 0;  // cudaDriverGetVersion, e.g. 13000
  int cuda_runtime = 0;     // cudaRuntimeGetVersion of the runtime linked into this binary
  // From NVML, when it could be loaded.
  std::string nvml_status;  // "ok" or why not
  std::string driver_version;  // e.g. "580.159.04"
  int sm_clock_mhz = 0, mem_clock_mhz = 0;  // current
  int nvml_max_sm_clock_mhz = 0, nvml_max_mem_clock_mhz = 0;
  double power_w = 0;
  int temperature_c = 0;
};

// Never throws: whatever cannot be read is left empty with the reason.
GpuSnapshot snapshot_gpu();
// One-line JSON object of the snapshot (for benchmark context).
std::string to_json(const GpuSnapshot& s);

}  // namespace mla::cuda
