// The device's facts for mla-bench: device ceilings, the device side of the one timing loop
// (suites/bench/kernel_loop.hpp: CUDA events on the implementation's stream, an L2 flush before
// each call, the device roofs and tokens-per-second counters, a CUDA context left unusable by a
// row), the FP8-over-bf16 ratio rows and the clocks row, registered into Google Benchmark.
//
// A library apart from mla-bench's main because it needs CUDA: mla-bench links it in a CUDA
// build (suites/bench/CMakeLists.txt); what it writes about points, implementations and
// rooflines is suites/bench/harness.hpp (suites/device/README.md, "mla-bench on a device").
#pragma once

#include <optional>
#include <string>
#include <vector>


#include <nlohmann/json.hpp>

#include "mla/cuda/ceilings.hpp"
#include "mla/cuda/timing.hpp"
#include "mla/core/kernel.hpp"
#include "mla/workloads/axes.hpp"
#include "kernel_loop.hpp"
#include "phase_rows.hpp"

namespace mla::device {

struct GpuBenchOptions {
  bool flush_l2 = true;                // evict L2 before every timed call
  cuda::GpuCeilingOptions ceilings;    // sizes and repetitions of the context ceilings
  std::size_t host_budget_bytes = 0;   // refuse points whose host inputs exceed a quarter of this (0: no limit)
};

// The measured state of the device, taken once before the benchmarks are registered.
struct GpuBenchSetup {
  GpuBenchOptions options;
  cuda::GpuSnapshot gpu;                   // identity, driver, clocks before the run
  std::vector<cuda::GpuCeiling> ceilings;  // gpu_read_bw, gpu_copy_bw, gpu_gemm_bf16
  double ceiling(const std::string& key) const;  // 0 when absent
};

// Key names of the ceilings that judge a CUDA attention kernel: the decode kernels mostly read, so
// the read stream is their bandwidth roof; their arithmetic runs on bf16 tensor cores.
inline constexpr const char* kRoofBw = "gpu_read_bw";
inline constexpr const char* kRoofPeak = "gpu_gemm_bf16";

// Snapshot + ceilings. Throws mla::Error when no device is usable or a probe fails.
GpuBenchSetup prepare_gpu_bench(const GpuBenchOptions& o);

// Context for the JSON: mla_gpu (the snapshot), mla_gpu_name, mla_gpu_driver, mla_gpu_timing,
// mla_gpu_l2_flush_bytes. mla_ceilings / mla_kernels / mla_points are the caller's (mla-bench
// merges several sources into them); the helpers below give the GPU entries.
void add_gpu_context(const GpuBenchSetup& s);
// {key: {value, unit, method, median, best_ms, reps}} for merging into mla_ceilings.
nlohmann::ordered_json ceilings_json(const GpuBenchSetup& s);
// One mla_kernels entry (suites/bench/harness.hpp, as mla-bench writes it) with the GPU roofs.
// The points' entries are mla::bench::point_json's.
nlohmann::ordered_json kernel_json(const AttentionImpl& impl);

// `ceiling/gpu_read_bw`, `ceiling/gpu_copy_bw`, `ceiling/gpu_gemm_bf16/<n>` as manual-time
// benchmarks (CUDA events), so the ceilings sit in the same JSON and are tracked run to run.
void register_gpu_ceiling_benchmarks(const GpuBenchSetup& s);
// `mla/<kernel>/<point>`, manual time, through the one timing loop with the device side. A row
// that is not timed is a SkipWithError with the reason. The setup must outlive the benchmark run.
void register_gpu_kernel_row(const GpuBenchSetup& s, const bench::RowCase& rc);
// The device side of the prefill, merge, top-k, indexer logits and sparse prefill rows of CUDA
// kernels (suites/bench/phase_rows.hpp): the decode rows' timer (CUDA events on the prepared
// call's stream when it tells it, the L2 flush before each call) and the same device roofs.
std::unique_ptr<bench::PhaseSide> make_phase_side(const GpuBenchSetup& s);

// `mla_ratio/<kernel>/<fp8 point>_vs_<bf16 point>` for every selected FP8 point whose bf16 twin
// (same shape, lengths and seed) is selected too: the measured median-time ratio of the two
// kernel rows, their tokens/s and byte models (register after the kernel rows).
void register_gpu_format_ratio_rows(const std::vector<const AttentionImpl*>& impls,
                                    const std::vector<const axes::AxisPoint*>& points);
// `gpu/clocks_after`: one iteration recording the clocks, power and temperature after the run
// (register it last; a clock that dropped during the run explains slow rows).
void register_gpu_clock_row();

// Set once a kernel row left the CUDA context unusable (a sticky error: an illegal address, a
// kernel trap): which row and the error. Every later row is then skipped with that reason
// instead of failing with the same error, so the first failure is the one the output names.
std::optional<std::string> context_poisoned();

}  // namespace mla::device
