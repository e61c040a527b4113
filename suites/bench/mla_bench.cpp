// mla-bench: the one benchmark driver. Every selected attention implementation over the shared
// axes (mla/workloads/axes.hpp), each timed where it computes: on the host with the host clock,
// on a device with CUDA events; the registered prefill and merge implementations over their axes
// (mla/workloads/phase_axes.hpp) through the same loop on the host (phase_rows.hpp); the ceilings
// of whatever is timed are measured in the same run.
//
//   mla-bench --mla_quick --benchmark_out=run.json
//   mla-bench --mla_tier=gpu --mla_backend=cuda --mla_quick --benchmark_out=gpu.json
//
// Own flags (removed before Google Benchmark sees the command line by bench_options.cpp, which
// also selects the points and kernels; suites/bench/README.md has the table):
//   which kernels and points
//   --mla_tier=cpu_quick|cpu_full|gpu   which axis points (default cpu_quick); tier gpu runs only
//                                       the non-CPU implementations unless --mla_kernels names some
//   --mla_points=a,b                    only these axis points (any tier)
//   --mla_kernels=a,b                   only these registered implementations (default: all)
//   --mla_backend=cpu|cuda              only registered implementations of this backend
//   --mla_plugin=LIB.so                 also a C plug-in (repeatable), called in this process
//   --mla_python=SPEC                   also a Python kernel (repeatable; SPEC as `mla certify
//                                       --python`), called in one long-lived child of the door
//   --mla_python_exe=PATH               the Python that runs --mla_python kernels (default python3)
//   --kernel NAME, --plugin LIB.so, --python SPEC, --python-exe PATH
//                                       the same selectors spelled as `mla certify` spells them
//                                       (--kernel: one registered name, repeatable)
//   --mla_external_points=a,b           time the --mla_plugin/--mla_python kernels only at these of
//                                       the run's points (default: all); their other rows say so
//   how
//   --mla_quick                         unless given: 5 repetitions, --benchmark_min_time=0.05
//   --mla_no_flush                      no eviction between timed calls (host LLC, device L2)
//   --mla_threads=N                     threads of the CPU implementations and the host probes
//   --mla_input_threads=N               threads that build the inputs (default: MLA_THREADS, else
//                                       every core)
//   --mla_max_mem_gib=X                 refuse points whose inputs exceed X/4 GiB (default: half
//                                       of MemAvailable)
//   host ceilings (measured only when some kernel is timed on the host)
//   --mla_stream_mib=N                  size of each host STREAM array (default 256)
//   --mla_ceiling_reps=N                best of N for the host context ceilings (default 5)
//   device ceilings (measured only when some kernel is timed on a device)
//   --mla_gpu_stream_mib=N              device read-probe buffer; the copy moves N/2 MiB each way
//                                       (default 2048)
//   --mla_gpu_ceiling_reps=N            timed repetitions of each device ceiling (default 10)
//   --mla_gpu_gemm_n=N                  m = n = k of the device bf16 GEMM ceiling (default 8192)
//   and exit
//   --mla_list                          print the axis catalog (TSV, every point, its tiers)
//   --mla_list_points                   print the selected points (TSV, the columns
//                                       torch_side_by_side.py reads); needs no GPU
//   --mla_probe                         print the GPU snapshot (JSON, or why there is no usable
//                                       GPU) and exit 0, or 77 without one (always in a build
//                                       without CUDA)
//
// Speed only where correct: every kernel's output at a point is judged by the certifier's judge
// before the point is timed (point_judge.hpp); a point it does not pass is a "not timed: FAIL"
// row. Each external kernel also gets a "<name>~overhead" row per point: its calling path with a
// kernel that does nothing (mla/certify/external_bench.hpp), timed the same way.
//
// What is timed (kernel_loop.hpp, the one loop): a kernel of backend `cuda` on a usable device
// (a CUDA build, suites/device/gpu_bench.hpp): CUDA events around run() on its stream when the
// prepared call exposes it, else the host clock around run()+synchronize(), after a device L2
// flush; any other kernel: the host clock around run()+synchronize(), after a host LLC eviction
// for points with at least 2 MiB of inputs. Input generation, prepare, the judging and the
// flushes are never inside the measured interval.
//
// --benchmark_out=FILE (JSON, the default format) is written by this program: after the context
// and after every benchmark FILE is rewritten as a complete document of the rows so far
// (suites/device/bench_rows.hpp), with "mla_run": {"complete": ...} at the top, so a run stopped
// by a timeout keeps every finished row and says it did not finish.
//
// Exit status: 0 ran; 1 setup failed (registering kernels, measuring a ceiling); 2 bad usage;
// 3 a row left the CUDA context unusable (the later rows say so; stderr names the row); 77 every
// selected kernel needs a GPU and none is usable (the reason on stderr; the conventional
// "skipped" status, so CTest and suites/device/check.sh record a skip).
#include <benchmark/benchmark.h>

#ifndef MLA_BENCH_WITH_GPU
#define MLA_BENCH_WITH_GPU 0
#endif

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_host.hpp"
#include "bench_options.hpp"
#include "bench_rows.hpp"
#include "ceilings.hpp"
#include "harness.hpp"
#include "kernel_loop.hpp"
#include "phase_rows.hpp"
#include "mla/certify/external_bench.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/isa.hpp"
#include "mla/core/threads.hpp"
#if MLA_BENCH_WITH_GPU
// The device's facts (suites/device): device ceilings, the device side of the timing loop, the
// ratio and clocks rows, linked when the CUDA build has them (suites/bench/CMakeLists.txt).
#include "gpu_bench.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/timing.hpp"
#endif
#include "mla/core/kernel.hpp"
#include "mla/workloads/axes.hpp"
#include "mla/registry/registry.hpp"

namespace {

using mla::bench::CeilingSet;
using mla::bench::Options;
using mla::bench::open_external_kernels;
using mla::bench::print_points_tsv;
using mla::bench::print_table;
using mla::bench::select_kernels;
using mla::bench::select_points;
using mla::bench::take_options;

constexpr int kExitSetup = 1, kExitUsage = 2, kExitPoisoned = 3, kExitNoGpu = 77;

std::string fmt_si(double v) { return fmt::format("{:.6g}", v); }

// Why no kernel can be timed on a device here (nullopt: a device is usable).
std::optional<std::string> device_unavailable_reason() {
#if MLA_BENCH_WITH_GPU
  return mla::cuda::unavailable_reason();
#else
  return std::string("CUDA unavailable: this mla-bench was built without CUDA");
#endif
}

// --mla_probe: the GPU snapshot, or why there is none.
int probe_gpu() {
#if MLA_BENCH_WITH_GPU
  const auto snap = mla::cuda::snapshot_gpu();
  std::cout << mla::cuda::to_json(snap) << "\n";
  return snap.available ? 0 : kExitNoGpu;
#else
  std::cout << nlohmann::json{{"available", false}, {"unavailable", *device_unavailable_reason()}}.dump() << "\n";
  return kExitNoGpu;
#endif
}

// Which host ceilings judge an implementation. Device implementations get none here (the
// device side gives the `cuda` ones their device's roofs) rather than a CPU number that would
// make a GPU look 100x past its roof.
// Every kind (decode, prefill, merge, indexer logits, top-k, sparse prefill) is held to the same roofs by the precision
// it computes in.
mla::bench::Roof roof_for(const std::string& backend, mla::OutDType compute, const CeilingSet& c) {
  mla::bench::Roof r;
  if (backend != "cpu") return r;
  r.bw_name = "read_bw";  // the kernels mostly read: the read-only probe is their bandwidth roof
  r.bw = c.read_bw;
  if (compute == mla::OutDType::f64) {
    r.peak = c.fma_f64;
    r.peak_name = "fma_f64";
  } else {
    // fp32 and bf16 CPU implementations compute in fp32.
    r.peak = c.fma_f32;
    r.peak_name = "fma_f32";
  }
  return r;
}
mla::bench::Roof roof_for(const mla::KernelInfo& info, const CeilingSet& c) { return roof_for(info.backend, info.out_dtype, c); }
template <class PhaseImpl>
mla::bench::Roof roof_for(const PhaseImpl& impl, const CeilingSet& c) {
  const auto k = mla::bench::facts_of(impl);
  return roof_for(k.backend, k.compute, c);
}

// The host's side of the one timing loop (kernel_loop.hpp): the host clock after an LLC
// eviction, the host roofs, and what the process and the machine's other tenants did with the
// CPUs meanwhile; the same for decode rows (RowSide) and prefill and merge rows (PhaseSide).
class HostSide : public mla::bench::RowSide, public mla::bench::PhaseSide {
 public:
  HostSide(const CeilingSet* ceilings, mla::bench::CacheFlusher* flusher, std::size_t flush_min_bytes, int threads)
      : ceilings_(ceilings), flusher_(flusher), flush_min_bytes_(flush_min_bytes), threads_(threads) {}

  std::unique_ptr<mla::bench::CallTimer> timer(const mla::bench::RowCase& rc, mla::PreparedAttention&) override {
    return host_timer(rc.impl->info().backend, mla::axes::footprint(*rc.point).total());
  }
  std::unique_ptr<mla::bench::CallTimer> timer(const mla::bench::KernelFacts& k, std::size_t input_bytes,
                                               const mla::bench::PreparedRef&) override {
    return host_timer(k.backend, input_bytes);
  }

  void finish(benchmark::State& st, const mla::bench::RowCase& rc, const mla::AttnInputs&,
              const mla::bench::RowResult& r) override {
    const auto& i = rc.impl->info();
    finish_row(st, {i.name, i.backend, i.out_dtype}, rc.out_of_process, r);
  }
  void finish(benchmark::State& st, const mla::bench::KernelFacts& k, const mla::bench::RowResult& r) override {
    finish_row(st, k, k.out_of_process, r);
  }

 private:
  std::unique_ptr<mla::bench::CallTimer> host_timer(const std::string& backend, std::size_t input_bytes) const {
    // Host caches only, and only for a host kernel: a device kernel timed here (no usable
    // device) would need a device-side flush. Tiny points (the edges) are timed warm too:
    // evicting the LLC costs milliseconds, so a cold measurement of a microsecond call would
    // spend minutes flushing for no roofline value.
    const bool cold = flusher_ && backend == "cpu" && input_bytes >= flush_min_bytes_;
    if (!cold) return std::make_unique<mla::bench::HostClockTimer>();
    return std::make_unique<mla::bench::HostClockTimer>([f = flusher_] { f->flush(); });
  }

  // The counters and label of a timed row of any kind; `k.compute` picks the FMA roof.
  void finish_row(benchmark::State& st, const mla::bench::KernelFacts& k, bool out_of_process,
                  const mla::bench::RowResult& r) const {
    using C = benchmark::Counter;
    const double seconds = r.total();
    const std::string bound = mla::bench::roofline_counters(st, r.cost, seconds, roof_for(k.backend, k.compute, *ceilings_));
    st.counters["cold_cache"] = C(r.flushed ? 1.0 : 0.0);
    // A top-k does no arithmetic: its rate is the logits it reads per second (the wall time).
    if (r.logits > 0) st.counters["logits_per_second"] = C(r.logits, C::kIsIterationInvariantRate);
    // CPU time the process got during the timed calls per wall second and thread: below 1 the
    // implementation was descheduled (a busy machine), so its times overstate its cost.
    // A Python kernel computes in the door's child, whose CPU time this process does not see: no
    // CPU figures for it rather than a share of 0 that would read as "descheduled".
    const bool own_cpu = k.backend == "cpu" && !out_of_process;
    if (own_cpu && seconds > 0) st.counters["cpu_share"] = C(r.cpu_seconds / (seconds * threads_));
    // Who else had the CPUs while this row ran: other processes' work in CPUs' worth, the
    // hypervisor's steal, and the fraction of the time a runnable task waited for a CPU. A
    // cpu_share below 1 with others_cpus near 0 is ours (a serial section, an imbalance).
    if (own_cpu && r.load.ok) {
      st.counters["others_cpus"] = C(r.load.others_cpus);
      st.counters["steal_cpus"] = C(r.load.steal_cpus);
      if (r.load.psi) st.counters["cpu_wait"] = C(r.load.cpu_wait);
    }
    // The FLOP rate per CPU second the process got, against the FMA probe's rate per CPU second
    // (a core's peak): what the implementation reaches on the cores it was given. On a shared
    // machine the wall rate (pct_of_flop_ceiling) also counts the time other processes held the
    // cores; this one does not, so the two together tell a slow kernel from a busy machine.
    if (own_cpu && r.cpu_seconds > 0) {
      const bool f64 = k.compute == mla::OutDType::f64;
      const double per_cpu = f64 ? ceilings_->fma_f64_per_cpu_second : ceilings_->fma_f32_per_cpu_second;
      if (per_cpu > 0)
        st.counters["pct_of_flop_ceiling_per_cpu_second"] =
            C(100.0 * r.cost.flops * static_cast<double>(st.iterations()) / r.cpu_seconds / per_cpu);
    }
    if (!bound.empty()) {
      st.SetLabel(fmt::format("{}{}", bound, r.flushed ? "" : "; warm caches"));
    } else {
      st.SetLabel(fmt::format("no ceiling: none measured for backend {} in this run; device caches not flushed",
                              k.backend));
    }
  }

  const CeilingSet* ceilings_;
  mla::bench::CacheFlusher* flusher_;  // nullptr: --mla_no_flush
  std::size_t flush_min_bytes_;        // points with smaller inputs are timed with warm caches
  int threads_;                        // threads the CPU implementations use (--mla_threads)
};

// --- the host ceiling probes as benchmarks (rows in the same JSON) ---------------------------

void bench_read_bw(benchmark::State& st, std::size_t bytes_per_thread) {
  const std::size_t n = bytes_per_thread / sizeof(double);
  std::vector<double> a(n, 1.0);
  double s = 0;
  for (auto _ : st) {
    s += mla::bench::read_sum(a.data(), n);
    benchmark::DoNotOptimize(s);
  }
  st.SetBytesProcessed(static_cast<int64_t>(n * sizeof(double)) * st.iterations());
}

void bench_triad(benchmark::State& st, std::size_t bytes_per_thread) {
  const std::size_t n = bytes_per_thread / sizeof(double);
  std::vector<double> a(n, 0.0), b(n, 1.0), c(n, 2.0);
  for (auto _ : st) {
    mla::bench::triad(a.data(), b.data(), c.data(), 3.0, n);
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(3 * n * sizeof(double)) * st.iterations());
}

void bench_fma(benchmark::State& st, mla::bench::Isa isa, bool f64) {
  constexpr int64_t kIters = 1 << 20;
  double flops = 0, total = 0;
  for (auto _ : st) {
    double r = f64 ? mla::bench::fma_f64(isa, kIters, &flops) : mla::bench::fma_f32(isa, kIters, &flops);
    benchmark::DoNotOptimize(r);
    total += flops;
  }
  st.counters["flop_per_second"] = benchmark::Counter(total, benchmark::Counter::kIsRate);
}

void bench_gemm(benchmark::State& st, int n) {
  mla::bench::Gemm g(n);
  benchmark::DoNotOptimize(g.run());
  double total = 0;
  for (auto _ : st) {
    benchmark::DoNotOptimize(g.run());
    total += g.flops();
  }
  // This thread's FLOPs as a plain rate: Google Benchmark sums counters over threads and divides
  // by the (thread-averaged) real time, giving the aggregate rate.
  st.counters["flop_per_second"] = benchmark::Counter(total, benchmark::Counter::kIsRate);
}

// The run's host context, everything a report or a regression gate needs to interpret the rows
// (machine, threads, ISA, cache flush, ceilings, the load during the FMA probes); returns the
// ceilings' table (empty when `ceilings` is null: nothing is timed on the host), which the
// device side extends before it is written.
nlohmann::ordered_json add_run_context(const Options& o, const CeilingSet* ceilings, std::size_t llc,
                                       std::size_t flush_bytes, std::size_t flush_min_bytes) {
  benchmark::AddCustomContext("mla_bench_format", "1");
  // mla_cpu_model names the host in every run (the regression gate keys machines on it); a
  // device is named by mla_gpu_name.
  benchmark::AddCustomContext("mla_cpu_model", mla::bench::cpu_model());
  benchmark::AddCustomContext("mla_input_threads", std::to_string(mla::gen::threads()));
  benchmark::AddCustomContext("mla_input_generator", std::string("splitmix64-uniform-v1, ") +
                                                         mla::gen::to_string(mla::gen::best_isa()) + " kernel");
  benchmark::AddCustomContext("mla_threads", std::to_string(o.threads));
  benchmark::AddCustomContext("mla_hardware_threads", std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("mla_tier", o.points.empty() ? mla::axes::to_string(o.tier) : "explicit points");
  benchmark::AddCustomContext("mla_isa_runtime", mla::bench::to_string(mla::bench::runtime_isa()));
  benchmark::AddCustomContext("mla_isa_build", mla::bench::to_string(mla::bench::build_isa()));
  // What the host implementations' products dispatch to at run time (mla/ref/gemm.hpp).
  benchmark::AddCustomContext("mla_isa_kernels", mla::to_string(mla::simd_isa()));
  benchmark::AddCustomContext("mla_llc_bytes", std::to_string(llc));
  benchmark::AddCustomContext("mla_cache_flush_bytes", std::to_string(flush_bytes));
  benchmark::AddCustomContext("mla_cache_flush_min_input_bytes", std::to_string(flush_min_bytes));
  benchmark::AddCustomContext("mla_timing",
                              "host-timed rows: manual time of run()+synchronize() only; inputs, prepare and the cache "
                              "flush are untimed (device-timed rows: mla_gpu_timing)");
  benchmark::AddCustomContext("mla_judged_before_timing",
                              "each kernel's output at each point is judged by the certifier's judge and tolerance table "
                              "against the fp64 oracle before the point is timed; a point it does not pass is a "
                              "'not timed: FAIL' row (calling-path overhead rows are timed, never judged)");
  benchmark::AddCustomContext(
      "mla_axes_note",
      "CPU tiers reduce batch (and some contexts) so the fp64 CPU reference fits a CI run; each point's scaled_from "
      "names its production shape");
  // ordered_json: the table's order is the report's order (a plain json object sorts its keys).
  nlohmann::ordered_json cj = nlohmann::ordered_json::object();
  if (!ceilings) {
    benchmark::AddCustomContext("mla_host_ceilings", "not measured: no kernel of this run is timed on the host");
    return cj;
  }
  for (const auto& c : ceilings->all) {
    benchmark::AddCustomContext("mla_ceiling_" + c.key, fmt_si(c.value));
    cj[c.key] = {{"value", c.value}, {"unit", c.unit}, {"method", c.method}};
  }
  cj["threads"] = ceilings->threads;
  // What the FMA probes got and what else ran meanwhile (bench_host.hpp, machine_load): a wall
  // ceiling below threads x the per-CPU-second one with others_cpus > 0 was measured on a
  // machine others shared; with others_cpus near 0 it is the cores' own scaling.
  nlohmann::ordered_json lj = nlohmann::ordered_json::object();
  for (const auto& pl : ceilings->probe_loads) {
    nlohmann::ordered_json e = {{"process_cpus", pl.own_cpus},
                                {"others_cpus", pl.load.others_cpus},
                                {"steal_cpus", pl.load.steal_cpus}};
    if (pl.load.psi) e["cpu_wait"] = pl.load.cpu_wait;
    if (pl.load.ok) lj[pl.key] = e;
  }
  benchmark::AddCustomContext("mla_ceilings_machine_load", lj.dump());
  cj["best_of"] = o.ceiling_reps;
  return cj;
}

// The host ceiling probes as benchmarks, with the kernels' thread count.
void register_ceiling_benchmarks(int T, std::size_t stream_bytes) {
  const std::size_t per_thread = stream_bytes / static_cast<std::size_t>(T);
  // A fixed minimum time: a short --benchmark_min_time for the kernels must not make the
  // ceilings a single noisy iteration.
  constexpr double kCeilingMinTime = 0.2;
  benchmark::RegisterBenchmark("ceiling/read_bw", bench_read_bw, per_thread)->Threads(T)->UseRealTime()->MinTime(kCeilingMinTime);
  benchmark::RegisterBenchmark("ceiling/triad_bw", bench_triad, per_thread)->Threads(T)->UseRealTime()->MinTime(kCeilingMinTime);
  const auto isa = mla::bench::runtime_isa();
  benchmark::RegisterBenchmark(fmt::format("ceiling/fma_f64/{}", mla::bench::to_string(isa)).c_str(), bench_fma, isa, true)
      ->Threads(T)->UseRealTime()->MinTime(kCeilingMinTime);
  benchmark::RegisterBenchmark(fmt::format("ceiling/fma_f32/{}", mla::bench::to_string(isa)).c_str(), bench_fma, isa, false)
      ->Threads(T)->UseRealTime()->MinTime(kCeilingMinTime);
  benchmark::RegisterBenchmark("ceiling/gemm_f64_eigen/512", bench_gemm, 512)->Threads(T)->UseRealTime()->MinTime(kCeilingMinTime);
}


// What this run times and where: the kernels (registered, then each external one followed by
// its calling path's overhead row), the points, and whether a device is usable.
struct Run {
  std::vector<const mla::AttentionImpl*> impls;
  std::vector<const mla::axes::AxisPoint*> points;
  std::vector<std::string> external_points;  // empty: every point
  std::vector<mla::certify::ExternalBenchKernel> externals;
  std::map<const mla::AttentionImpl*, const mla::certify::ExternalBenchKernel*> external_of;
  // An external kernel's prefill, merge, top-k, indexer logits and sparse prefill entries (and their overhead
  // rows) in `phase`, by address: where each came from and, for an overhead row, whose it is.
  struct PhaseExternal {
    const mla::certify::ExternalBenchKernel* from = nullptr;
    std::string overhead_of;  // empty: the entry itself
  };
  std::map<const void*, PhaseExternal> phase_external;
  std::optional<std::string> device_why;  // nullopt: a device is usable
  std::size_t budget = 0;                 // host memory budget (--mla_max_mem_gib)
  mla::bench::PhaseSelection phase;       // the prefill and merge rows (host side)

  // A `cuda` kernel is timed on the device when there is one; without one it goes through the
  // host side, whose first refusal (unavailable) gives the row its reason.
  bool on_device(const mla::AttentionImpl* k) const { return !device_why && k->info().backend == "cuda"; }
  bool any(bool device) const {
    return std::any_of(impls.begin(), impls.end(), [&](const auto* k) { return on_device(k) == device; });
  }
  // The same for a kernel of the other kinds (prefill, merge, top-k, indexer logits, sparse prefill).
  bool phase_on_device(const std::string& backend) const { return !device_why && backend == "cuda"; }
  // Whether some selected kernel of those kinds, with points of its kind, is timed on the device
  // (`device`) or on the host.
  bool phase_any(bool device) const {
    bool found = false;
    const auto scan = [&](const auto& points, const auto& kernels) {
      if (points.empty()) return;
      for (const auto* k : kernels) found = found || phase_on_device(k->info().backend) == device;
    };
    scan(phase.prefill_points, phase.prefill);
    scan(phase.merge_points, phase.merge);
    scan(phase.indexer_logits_points, phase.indexer_logits);
    scan(phase.topk_points, phase.topk);
    scan(phase.sparse_prefill_points, phase.sparse_prefill);
    return found;
  }
  bool is_overhead(const mla::AttentionImpl* k) const {
    const auto it = external_of.find(k);
    return it != external_of.end() && it->second->overhead.get() == k;
  }
  mla::bench::RowCase row(const mla::AttentionImpl* k, const mla::axes::AxisPoint* p) const {
    mla::bench::RowCase rc;
    rc.impl = k;
    rc.point = p;
    rc.mem_budget = budget;
    if (const auto it = external_of.find(k); it != external_of.end()) {
      rc.claim = it->second->claim;
      if (!external_points.empty() &&
          std::find(external_points.begin(), external_points.end(), p->name) == external_points.end())
        rc.not_timed = "not timed: this run times its external kernels only at --mla_external_points";
      rc.overhead = is_overhead(k);
      rc.out_of_process = it->second->origin.value("kind", "") == "python";
    }
    return rc;
  }
};

// The command line up to Google Benchmark's part: options, thread counts, points, and the
// flags that print and exit. Returns an exit status when the program ends here.
std::optional<int> take_command_line(int& argc, char** argv, Options& o, Run& run) {
  try {
    o = take_options(argc, argv);
    // One thread count for the kernels (they read mla::threads()) and the host ceilings, so a
    // % of ceiling compares like with like.
    if (o.threads > 0) mla::set_threads(o.threads);
    o.threads = mla::threads();
    if (o.input_threads > 0) mla::gen::set_threads(o.input_threads);
    (void)mla::gen::threads();  // a malformed MLA_THREADS is a usage error, not a failure mid-run
    (void)mla::simd_isa();      // a malformed MLA_ISA is a usage error here, not an error row
    run.points = select_points(o);
    run.phase = mla::bench::select_phase_points(o);
    for (const auto& name : o.external_points)
      if (std::none_of(run.points.begin(), run.points.end(), [&](const auto* p) { return p->name == name; }))
        throw mla::Error("--mla_external_points: '" + name + "' is not one of this run's points");
    run.external_points = o.external_points;
  } catch (const std::exception& e) {
    std::cerr << "mla-bench: " << e.what() << "\n";
    return kExitUsage;
  }
  if (o.list) {
    print_table();
    return 0;
  }
  if (o.list_points) {
    print_points_tsv(run.points);
    return 0;
  }
  if (o.probe) return probe_gpu();
  return std::nullopt;
}

// The kernels: registered ones, then the external ones. Returns an exit status on failure.
std::optional<int> take_kernels(const Options& o, Run& run) {
  try {
    mla::register_builtin_kernels();
  } catch (const std::exception& e) {
    std::cerr << "mla-bench: registering kernels failed: " << e.what() << "\n";
    return kExitSetup;
  }
  if (!select_kernels(o, run.impls)) return kExitUsage;
  mla::bench::select_phase_kernels(o, run.phase);
  try {
    run.externals = open_external_kernels(o);
  } catch (const std::exception& e) {
    std::cerr << "mla-bench: " << e.what() << "\n";
    return kExitUsage;
  }
  for (const auto& e : run.externals) {
    if (e.impl) {
      run.impls.push_back(e.impl.get());
      run.impls.push_back(e.overhead.get());
      run.external_of[e.impl.get()] = run.external_of[e.overhead.get()] = &e;
    }
    // Each other entry beside the registered kernels of its kind, its overhead row after it.
    const auto add = [&](auto& list, const auto& entry, const auto& overhead) {
      if (!entry) return;
      list.push_back(entry.get());
      list.push_back(overhead.get());
      run.phase_external[entry.get()] = {&e, ""};
      run.phase_external[overhead.get()] = {&e, entry->info().name};
    };
    add(run.phase.prefill, e.prefill, e.prefill_overhead);
    add(run.phase.merge, e.merge, e.merge_overhead);
    add(run.phase.topk, e.topk, e.topk_overhead);
    add(run.phase.indexer_logits, e.indexer_logits, e.indexer_logits_overhead);
    add(run.phase.sparse_prefill, e.sparse_prefill, e.sparse_prefill_overhead);
  }
  run.device_why = device_unavailable_reason();
  // Nothing to time without a device: the conventional "skipped" status with the reason.
  const bool all_device = !run.impls.empty() && std::all_of(run.impls.begin(), run.impls.end(), [](const auto* k) {
    return k->info().backend == "cuda";
  });
  if (all_device && !run.phase.any() && run.device_why) {
    std::cerr << "mla-bench: skipped: every selected kernel needs a GPU: " << *run.device_why << "\n";
    return kExitNoGpu;
  }
  const std::size_t avail = mla::bench::available_memory_bytes();
  run.budget = o.max_mem_gib > 0 ? static_cast<std::size_t>(o.max_mem_gib * (1u << 30))
                                 : (avail ? avail / 2 : std::size_t{4} << 30);
  return std::nullopt;
}

// mla_points and mla_kernels: which ceilings judge each kernel, and where external ones came from.
void add_points_and_kernels_context(const Run& run, const CeilingSet& ceilings) {
  nlohmann::ordered_json pj = nlohmann::ordered_json::object();
  for (const auto* p : run.points) pj[p->name] = mla::bench::point_json(*p);
  for (const auto* p : run.phase.prefill_points) pj[p->name] = mla::bench::point_json(*p);
  for (const auto* p : run.phase.merge_points) pj[p->name] = mla::bench::point_json(*p);
  for (const auto* p : run.phase.indexer_logits_points) pj[p->name] = mla::bench::point_json(*p);
  for (const auto* p : run.phase.topk_points) pj[p->name] = mla::bench::point_json(*p);
  for (const auto* p : run.phase.sparse_prefill_points) pj[p->name] = mla::bench::point_json(*p);
  benchmark::AddCustomContext("mla_points", pj.dump());
  nlohmann::ordered_json kj = nlohmann::ordered_json::array();
  for (const auto* k : run.impls) {
    // Which measured ceilings judge it (keys of mla_ceilings); null: none measured.
    auto j = mla::bench::kernel_json(*k, roof_for(k->info(), ceilings));
#if MLA_BENCH_WITH_GPU
    if (run.on_device(k)) j = mla::device::kernel_json(*k);
#endif
    if (const auto it = run.external_of.find(k); it != run.external_of.end()) {
      j["origin"] = it->second->origin;
      if (run.is_overhead(k)) j["overhead_of"] = it->second->impl->info().name;
    }
    kj.push_back(std::move(j));
  }
  // A prefill or merge kernel is listed only when it has rows: the report reads every listed
  // kernel as one with a row at each point of its kind. An external entry says where it came from.
  const auto phase_kernels = [&](const auto& points, const auto& kernels) {
    if (points.empty()) return;
    for (const auto* k : kernels) {
      auto roof = roof_for(*k, ceilings);
#if MLA_BENCH_WITH_GPU
      // Timed on the device: judged against the device ceilings (suites/device/gpu_bench.hpp).
      if (run.phase_on_device(k->info().backend)) roof = {mla::device::kRoofBw, mla::device::kRoofPeak, 0, 0};
#endif
      auto j = mla::bench::kernel_json(*k, roof);
      if (const auto it = run.phase_external.find(k); it != run.phase_external.end()) {
        j["origin"] = it->second.from->origin;
        if (!it->second.overhead_of.empty()) j["overhead_of"] = it->second.overhead_of;
      }
      kj.push_back(std::move(j));
    }
  };
  phase_kernels(run.phase.prefill_points, run.phase.prefill);
  phase_kernels(run.phase.merge_points, run.phase.merge);
  phase_kernels(run.phase.indexer_logits_points, run.phase.indexer_logits);
  phase_kernels(run.phase.topk_points, run.phase.topk);
  phase_kernels(run.phase.sparse_prefill_points, run.phase.sparse_prefill);
  benchmark::AddCustomContext("mla_kernels", kj.dump());
}

// The prefill, merge, indexer logits, top-k and sparse prefill rows, point-major like the decode rows, on the host side,
// or on the device side for a CUDA kernel when a device is usable.
// One kind's rows: every point of the kind by every kernel of it, `time_row` the kind's body.
template <class RowCase, class Point, class Impl>
void register_kind_rows(const Run& run, const std::vector<const Point*>& points, const std::vector<const Impl*>& kernels,
                        HostSide& host_side, mla::bench::PhaseSide* device_side,
                        mla::bench::RowResult (*time_row)(benchmark::State&, const RowCase&, mla::bench::PhaseSide&)) {
  for (const auto* p : points)
    for (const auto* k : kernels) {
      const auto ext = run.phase_external.find(k);
      const bool external = ext != run.phase_external.end();
      const RowCase rc{k, p, run.budget, external && !ext->second.overhead_of.empty(),
                       external && ext->second.from->origin.value("kind", "") == "python"};
      // A CUDA kernel with a device: the device side (events, L2 flush, device roofs).
      mla::bench::PhaseSide* side = &host_side;
      if (device_side && run.phase_on_device(k->info().backend)) side = device_side;
      auto* b = benchmark::RegisterBenchmark(fmt::format("mla/{}/{}", k->info().name, p->name).c_str(),
                                             [side, rc, time_row](benchmark::State& st) {
                                               (void)time_row(st, rc, *side);
                                             });
      b->UseManualTime()->Unit(benchmark::kMillisecond);
      // As the decode overhead rows: a fixed count of calls, not a minimum time of microsecond ones.
      if (rc.overhead) b->Iterations(mla::bench::kOverheadCalls);
    }
}

void register_phase_rows(const Run& run, HostSide& host_side, mla::bench::PhaseSide* device_side) {
  namespace b = mla::bench;
  register_kind_rows(run, run.phase.prefill_points, run.phase.prefill, host_side, device_side, &b::time_prefill_row);
  register_kind_rows(run, run.phase.merge_points, run.phase.merge, host_side, device_side, &b::time_merge_row);
  register_kind_rows(run, run.phase.indexer_logits_points, run.phase.indexer_logits, host_side, device_side,
                     &b::time_indexer_logits_row);
  register_kind_rows(run, run.phase.topk_points, run.phase.topk, host_side, device_side, &b::time_topk_row);
  register_kind_rows(run, run.phase.sparse_prefill_points, run.phase.sparse_prefill, host_side, device_side,
                     &b::time_sparse_prefill_row);
}

// Google Benchmark over the registered rows; the JSON file (--benchmark_out) rewritten after
// every row. Returns the exit status.
int run_benchmarks(const Options& o) {
  std::function<std::string()> stopped = [] { return std::string(); };
#if MLA_BENCH_WITH_GPU
  stopped = [] {
    const auto why = mla::device::context_poisoned();
    return why ? *why : std::string();
  };
#endif
  if (o.json_out.empty()) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    benchmark::ConsoleReporter console(benchmark::ConsoleReporter::OO_None);
    const auto file = mla::device::incremental_json_reporter(o.json_out, stopped);
    const auto tee = mla::device::tee_reporter({&console, file.get()});
    benchmark::RunSpecifiedBenchmarks(tee.get());
  }
  benchmark::Shutdown();
  std::cerr << fmt::format("[mla-bench] kernels judged before timing; {} point truths computed in {:.1f} s (untimed)\n",
                           mla::bench::point_judge().truths() + mla::bench::phase_truths(),
                           mla::bench::point_judge().truth_seconds() + mla::bench::phase_truth_seconds());
  mla::bench::release_case_cache();  // before the CUDA runtime is torn down at exit
  mla::bench::release_phase_cache();
  if (const std::string why = stopped(); !why.empty()) {
    std::cerr << "mla-bench: stopped timing at " << why << "\n";
    return kExitPoisoned;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  Run run;
  if (const auto rc = take_command_line(argc, argv, o, run)) return *rc;
  if (!mla::bench::init_google_benchmark(argc, argv, o.quick)) return kExitUsage;
  if (const auto rc = take_kernels(o, run)) return *rc;

  // The host ceilings, eviction and context only when something is timed on the host: a
  // device run does not spend its time on probes no row is judged against.
  const bool host = run.any(false) || run.phase_any(false);
  const std::size_t llc = mla::bench::last_level_cache_bytes();
  const std::size_t stream_bytes = o.stream_mib << 20;
  CeilingSet ceilings;
  std::optional<mla::bench::CacheFlusher> flusher;
  if (host) {
    if (llc && stream_bytes < 4 * llc)
      std::cerr << fmt::format("[mla-bench] warning: STREAM arrays ({} MiB) are < 4x the last-level cache ({} MiB)\n",
                               o.stream_mib, llc >> 20);
    ceilings = mla::bench::measure_ceilings(o.threads, stream_bytes, o.ceiling_reps);
    if (o.flush) flusher.emplace(std::max<std::size_t>(2 * llc, std::size_t{32} << 20));
  }
  // Below this the points are the edges (sub-millisecond calls on < 1 MiB of inputs), where a
  // per-call eviction costs 10-100x the call and the roofline has nothing to learn.
  constexpr std::size_t flush_min_bytes = std::size_t{2} << 20;
  HostSide host_side(&ceilings, flusher ? &*flusher : nullptr, flush_min_bytes, o.threads);
  nlohmann::ordered_json cj =
      add_run_context(o, host ? &ceilings : nullptr, llc, flusher ? flusher->bytes() : 0, flush_min_bytes);

#if MLA_BENCH_WITH_GPU
  std::optional<mla::device::GpuBenchSetup> gpu;
  if (run.any(true) || run.phase_any(true)) {
    mla::device::GpuBenchOptions go;
    go.flush_l2 = o.flush;
    go.host_budget_bytes = run.budget;
    go.ceilings.reps = o.gpu_ceiling_reps;
    go.ceilings.stream_bytes = o.gpu_stream_mib << 20;
    go.ceilings.gemm_n = o.gpu_gemm_n;
    try {
      gpu.emplace(mla::device::prepare_gpu_bench(go));
    } catch (const std::exception& e) {
      std::cerr << "mla-bench: measuring the device ceilings failed: " << e.what() << "\n";
      return kExitSetup;
    }
    const nlohmann::ordered_json gj = mla::device::ceilings_json(*gpu);  // named: items() views it
    for (const auto& el : gj.items()) cj[el.key()] = el.value();
    mla::device::add_gpu_context(*gpu);
  }
#endif
  benchmark::AddCustomContext("mla_device_half", MLA_BENCH_WITH_GPU ? "linked (suites/device)" : "not built (no CUDA)");
  benchmark::AddCustomContext("mla_ceilings", cj.dump());
  add_points_and_kernels_context(run, ceilings);

  if (host) register_ceiling_benchmarks(o.threads, stream_bytes);
#if MLA_BENCH_WITH_GPU
  if (gpu) mla::device::register_gpu_ceiling_benchmarks(*gpu);
#endif
  // Kernels x points, point-major so each point's inputs are built once for all kernels.
  for (const auto* p : run.points)
    for (const auto* k : run.impls) {
#if MLA_BENCH_WITH_GPU
      if (gpu && run.on_device(k)) {
        mla::device::register_gpu_kernel_row(*gpu, run.row(k, p));
        continue;
      }
#endif
      const auto rc = run.row(k, p);
      auto* b = benchmark::RegisterBenchmark(fmt::format("mla/{}/{}", k->info().name, p->name).c_str(),
                                             [&host_side, rc](benchmark::State& st) {
                                               (void)mla::bench::time_kernel_row(st, rc, host_side);
                                             });
      b->UseManualTime()->Unit(benchmark::kMillisecond);
      if (rc.overhead) b->Iterations(mla::bench::kOverheadCalls);
    }
  std::unique_ptr<mla::bench::PhaseSide> device_phase_side;
#if MLA_BENCH_WITH_GPU
  if (gpu) device_phase_side = mla::device::make_phase_side(*gpu);
#endif
  register_phase_rows(run, host_side, device_phase_side.get());
#if MLA_BENCH_WITH_GPU
  if (gpu) {
    std::vector<const mla::AttentionImpl*> device_impls;
    for (const auto* k : run.impls)  // a calling path's overhead has no FP8-over-bf16 speedup to show
      if (run.on_device(k) && !run.is_overhead(k)) device_impls.push_back(k);
    mla::device::register_gpu_format_ratio_rows(device_impls, run.points);
    mla::device::register_gpu_clock_row();  // last: the clocks after the run
  }
#endif
  return run_benchmarks(o);
}
