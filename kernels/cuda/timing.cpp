#include "mla/cuda/timing.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "mla/core/error.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "detail/l2_flush.hpp"

namespace mla::cuda {

void require_device(const char* what) {
  if (auto why = unavailable_reason()) throw Error(fmt::format("{}: {}", what, *why));
}

// ---- EventTimer ---------------------------------------------------------------------------

EventTimer::EventTimer() {
  require_device("EventTimer");
  MLA_CUDA_CHECK(cudaEventCreate(&start_));
  try {
    MLA_CUDA_CHECK(cudaEventCreate(&stop_));
  } catch (...) {
    release();
    throw;
  }
}

EventTimer::~EventTimer() { release(); }

EventTimer::EventTimer(EventTimer&& o) noexcept
    : start_(std::exchange(o.start_, nullptr)), stop_(std::exchange(o.stop_, nullptr)),
      state_(std::exchange(o.state_, State::idle)) {}

EventTimer& EventTimer::operator=(EventTimer&& o) noexcept {
  if (this != &o) {
    release();
    start_ = std::exchange(o.start_, nullptr);
    stop_ = std::exchange(o.stop_, nullptr);
    state_ = std::exchange(o.state_, State::idle);
  }
  return *this;
}

void EventTimer::release() noexcept {
  // Destroying an event whose work is pending is allowed (the runtime defers the release).
  if (start_ != nullptr) (void)cudaEventDestroy(start_);
  if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
  (void)cudaGetLastError();
  start_ = stop_ = nullptr;
}

void EventTimer::start(cudaStream_t stream) {
  if (start_ == nullptr) throw Error("EventTimer::start on a moved-from timer");
  MLA_CUDA_CHECK(cudaEventRecord(start_, stream));
  state_ = State::started;
}

void EventTimer::stop(cudaStream_t stream) {
  if (state_ != State::started) throw Error("EventTimer::stop without a start");
  MLA_CUDA_CHECK(cudaEventRecord(stop_, stream));
  state_ = State::stopped;
}

float EventTimer::elapsed_ms() {
  if (state_ != State::stopped) throw Error("EventTimer::elapsed_ms before start() and stop()");
  MLA_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0.f;
  MLA_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

// ---- L2Flusher ----------------------------------------------------------------------------

namespace {
std::size_t device_l2_bytes() {
  int dev = 0, l2 = 0;
  MLA_CUDA_CHECK(cudaGetDevice(&dev));
  MLA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  return static_cast<std::size_t>(std::max(l2, 0));
}
}  // namespace

L2Flusher::L2Flusher(std::size_t bytes) {
  require_device("L2Flusher");
  if (bytes == 0) {
    l2_ = device_l2_bytes();
    bytes = std::max<std::size_t>(4 * l2_, std::size_t{64} << 20);
  }
  bytes = (bytes + 15) & ~std::size_t{15};
  int dev = 0, sms = 0, threads_per_sm = 0;
  MLA_CUDA_CHECK(cudaGetDevice(&dev));
  MLA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MLA_CUDA_CHECK(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  // A persistent grid of as many blocks as are resident at once, no more than there is to read.
  const std::size_t resident =
      static_cast<std::size_t>(std::max(sms, 1)) * std::max(1, threads_per_sm / detail::kL2FlushThreads);
  const std::size_t needed = (bytes / 16 + detail::kL2FlushThreads - 1) / detail::kL2FlushThreads;
  blocks_ = static_cast<int>(std::max<std::size_t>(1, std::min(resident, needed)));
  buf_ = DeviceBuffer(bytes);
  sink_ = DeviceBuffer(sizeof(unsigned long long));
  // Defined contents (zeros: every sum is 0, never the guard value), then one read pass: the
  // zero-fill's dirty lines are written back here, not in the first timed call.
  MLA_CUDA_CHECK(cudaMemset(buf_.data(), 0, buf_.size()));
  flush(nullptr);
  MLA_CUDA_CHECK(cudaDeviceSynchronize());
}

void L2Flusher::flush(cudaStream_t stream) {
  detail::l2_flush_read(buf_.data(), buf_.size(), blocks_, ~0ull, sink_.as<unsigned long long>(), stream);
}

std::string L2Flusher::method() const {
  return fmt::format(
      "read-only stream over {} MiB ({}), 16-byte ld.global.cg loads, no stores, before each timed call, untimed: "
      "L2 left holding clean lines only",
      buf_.size() >> 20, l2_ ? fmt::format("4x the {} MiB L2", l2_ >> 20) : std::string("size given"));
}

// ---- GpuSnapshot --------------------------------------------------------------------------

namespace {

// The few NVML entry points used, declared from NVML's documented C API (nvml.h is not part of
// the toolkit here). Return type nvmlReturn_t is an int enum, 0 = NVML_SUCCESS.
using nvmlDevice_t = struct nvmlDevice_st*;
using FnVoid = int (*)();
using FnDriverVersion = int (*)(char*, unsigned);
using FnHandleByPci = int (*)(const char*, nvmlDevice_t*);
using FnClock = int (*)(nvmlDevice_t, int, unsigned*);
using FnPower = int (*)(nvmlDevice_t, unsigned*);
using FnTemp = int (*)(nvmlDevice_t, int, unsigned*);
using FnErrorString = const char* (*)(int);
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2, kNvmlTemperatureGpu = 0;

void read_nvml(GpuSnapshot& s) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    s.nvml_status = std::string("libnvidia-ml.so.1 not loadable: ") + (e ? e : "unknown");
    return;
  }
  auto sym = [&](const char* n) { return dlsym(lib, n); };
  auto init = reinterpret_cast<FnVoid>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<FnVoid>(sym("nvmlShutdown"));
  auto driver = reinterpret_cast<FnDriverVersion>(sym("nvmlSystemGetDriverVersion"));
  auto by_pci = reinterpret_cast<FnHandleByPci>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  auto clock = reinterpret_cast<FnClock>(sym("nvmlDeviceGetClockInfo"));
  auto max_clock = reinterpret_cast<FnClock>(sym("nvmlDeviceGetMaxClockInfo"));
  auto power = reinterpret_cast<FnPower>(sym("nvmlDeviceGetPowerUsage"));
  auto temp = reinterpret_cast<FnTemp>(sym("nvmlDeviceGetTemperature"));
  auto err_str = reinterpret_cast<FnErrorString>(sym("nvmlErrorString"));
  auto why = [&](const char* what, int rc) {
    return fmt::format("{} returned {} ({})", what, rc, err_str ? err_str(rc) : "?");
  };
  if (!init || !shutdown || !driver || !by_pci || !clock || !max_clock) {
    s.nvml_status = "libnvidia-ml.so.1 lacks an expected entry point";
    dlclose(lib);
    return;
  }
  if (int rc = init(); rc != 0) {
    s.nvml_status = why("nvmlInit_v2", rc);
    dlclose(lib);
    return;
  }
  char buf[96] = {};
  if (driver(buf, sizeof buf) == 0) s.driver_version = buf;
  nvmlDevice_t dev = nullptr;
  if (s.pci_bus_id.empty()) {
    s.nvml_status = "no PCI bus id from the CUDA runtime to find the NVML device";
  } else if (int rc = by_pci(s.pci_bus_id.c_str(), &dev); rc != 0) {
    s.nvml_status = why("nvmlDeviceGetHandleByPciBusId_v2", rc);
  } else {
    unsigned v = 0;
    if (clock(dev, kNvmlClockSm, &v) == 0) s.sm_clock_mhz = static_cast<int>(v);
    if (clock(dev, kNvmlClockMem, &v) == 0) s.mem_clock_mhz = static_cast<int>(v);
    if (max_clock(dev, kNvmlClockSm, &v) == 0) s.nvml_max_sm_clock_mhz = static_cast<int>(v);
    if (max_clock(dev, kNvmlClockMem, &v) == 0) s.nvml_max_mem_clock_mhz = static_cast<int>(v);
    if (power && power(dev, &v) == 0) s.power_w = v / 1000.0;
    if (temp && temp(dev, kNvmlTemperatureGpu, &v) == 0) s.temperature_c = static_cast<int>(v);
    s.nvml_status = "ok";
  }
  (void)shutdown();
  dlclose(lib);
}

}  // namespace

GpuSnapshot snapshot_gpu() {
  GpuSnapshot s;
  (void)cudaDriverGetVersion(&s.cuda_driver_api);
  (void)cudaRuntimeGetVersion(&s.cuda_runtime);
  (void)cudaGetLastError();
  if (auto why = unavailable_reason()) {
    s.unavailable = *why;
    s.nvml_status = "not queried: no usable CUDA device";
    return s;
  }
  try {
    const DeviceInfo& d = current_device();
    s.available = true;
    s.device = d.device;
    s.name = d.name;
    s.cc_major = d.cc_major;
    s.cc_minor = d.cc_minor;
    s.sm_count = d.sm_count;
    s.memory_bytes = d.total_memory;
    auto attr = [&](cudaDeviceAttr a) {
      int v = 0;
      if (cudaDeviceGetAttribute(&v, a, d.device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
      }
      return v;
    };
    s.l2_bytes = static_cast<std::size_t>(attr(cudaDevAttrL2CacheSize));
    s.memory_bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
    s.max_sm_clock_mhz = attr(cudaDevAttrClockRate) / 1000;       // kHz -> MHz
    s.max_mem_clock_mhz = attr(cudaDevAttrMemoryClockRate) / 1000;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d.device) == cudaSuccess) s.pci_bus_id = bus;
    (void)cudaGetLastError();
  } catch (const std::exception& e) {
    s.available = false;
    s.unavailable = e.what();
    return s;
  }
  read_nvml(s);
  return s;
}

std::string to_json(const GpuSnapshot& s) {
  nlohmann::ordered_json j;
  j["available"] = s.available;
  if (!s.available) j["unavailable"] = s.unavailable;
  j["name"] = s.name;
  j["compute_capability"] = fmt::format("{}.{}", s.cc_major, s.cc_minor);
  j["sm_count"] = s.sm_count;
  j["l2_bytes"] = s.l2_bytes;
  j["memory_bytes"] = s.memory_bytes;
  j["memory_bus_bits"] = s.memory_bus_bits;
  j["max_sm_clock_mhz"] = s.max_sm_clock_mhz;
  j["max_mem_clock_mhz"] = s.max_mem_clock_mhz;
  j["pci_bus_id"] = s.pci_bus_id;
  j["cuda_driver_api"] = s.cuda_driver_api;
  j["cuda_runtime"] = s.cuda_runtime;
  j["nvml_status"] = s.nvml_status;
  j["driver_version"] = s.driver_version;
  j["sm_clock_mhz"] = s.sm_clock_mhz;
  j["mem_clock_mhz"] = s.mem_clock_mhz;
  j["nvml_max_sm_clock_mhz"] = s.nvml_max_sm_clock_mhz;
  j["nvml_max_mem_clock_mhz"] = s.nvml_max_mem_clock_mhz;
  j["power_w"] = s.power_w;
  j["temperature_c"] = s.temperature_c;
  return j.dump();
}

}  // namespace mla::cuda
