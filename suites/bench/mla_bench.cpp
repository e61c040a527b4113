// mla-bench: every registered attention implementation that can run here, over the shared axes
// (mla/workloads/axes.hpp), with the machine's ceilings measured in the same run.
//
//   mla-bench --mla_quick --benchmark_out=run.json --benchmark_out_format=json
//
// Own flags (removed before Google Benchmark sees the command line):
//   --mla_tier=cpu_quick|cpu_full|gpu   which axis points (default cpu_quick); tier gpu runs only
//                                       the non-CPU implementations unless --mla_kernels names some
//   --mla_quick                         unless given: 5 repetitions, --benchmark_min_time=0.05
//                                       (tier cpu_quick: a CPU report in about a minute on 2
//                                       cores; with --mla_tier=cpu_full about 3 minutes)
//   --mla_kernels=a,b                   only these implementations (default: all registered)
//   --mla_plugin=LIB.so                 also a C plug-in (repeatable), called in this process
//   --mla_python=SPEC                   also a Python kernel (repeatable; SPEC as `mla certify
//                                       --python`), called in one long-lived child of the door
//   --mla_python_exe=PATH               the Python that runs --mla_python kernels (default python3)
//
// Speed only where correct: every kernel's output at a point is judged by the certifier's judge
// before the point is timed (point_judge.hpp); a point it does not pass is a "not timed: FAIL"
// row. Each external kernel also gets a "<name>~overhead" row per point: its calling path with a
// kernel that does nothing (mla/certify/external_bench.hpp), timed the same way.
//
// In a CUDA build with a usable device, the `cuda` implementations are timed by the GPU half
// (suites/device/gpu_bench.hpp: CUDA events, L2 flush, device ceilings in the same JSON);
// without a device they are listed as unavailable rows.
//   --mla_points=a,b                    only these axis points (any tier)
//   --mla_threads=N                     threads of the CPU implementations and of the ceiling
//                                       probes, one setting for both (default: $MLA_THREADS, else
//                                       every core; mla/core/threads.hpp)
//   --mla_stream_mib=N                  size of each STREAM array (default 256)
//   --mla_ceiling_reps=N                best of N for the context ceilings (default 5)
//   --mla_no_flush                      do not evict the caches between timed calls (by
//                                       default they are evicted for points whose inputs are
//                                       at least 2 MiB, i.e. all but the edges)
//   --mla_max_mem_gib=X                 refuse points whose inputs exceed X/4 GiB (default:
//                                       half of MemAvailable)
//   --mla_list                          print the axis table (TSV) and exit
//
// What is timed: only `run()` + `synchronize()` of a prepared implementation (manual time);
// input generation, `prepare`, and the cache flush are outside the measured interval.
#include <benchmark/benchmark.h>

#ifndef MLA_BENCH_WITH_GPU
#define MLA_BENCH_WITH_GPU 0
#endif

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
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
#include "ceilings.hpp"
#include "harness.hpp"
#include "point_judge.hpp"
#include "mla/certify/external_bench.hpp"
#include "mla/core/error.hpp"
#include "mla/core/isa.hpp"
#include "mla/core/threads.hpp"
#if MLA_BENCH_WITH_GPU
// The GPU half (suites/device): device ceilings, CUDA-event timing and an L2 flush for the
// `cuda` implementations, linked when the CUDA build has it (suites/bench/CMakeLists.txt).
#include "gpu_bench.hpp"
#include "mla/cuda/device.hpp"
#endif
#include "mla/core/kernel.hpp"
#include "mla/workloads/axes.hpp"
#include "mla/registry/registry.hpp"

namespace {

using mla::bench::CeilingSet;
using Clock = std::chrono::steady_clock;

struct Options {
  mla::axes::Tier tier = mla::axes::cpu_quick;
  bool quick = false;
  std::vector<std::string> kernels;
  std::vector<std::string> points;
  std::vector<std::string> plugins, pythons;  // external kernels, in the order given
  std::string python_exe;
  int threads = 0;  // 0: mla::threads()
  std::size_t stream_mib = 256;
  int ceiling_reps = 5;
  bool flush = true;
  double max_mem_gib = 0;
  bool list = false;
};

// Removes --mla_* flags from argv and parses them; throws mla::Error on a bad value.
Options take_options(int& argc, char** argv) {
  Options o;
  mla::bench::take_mla_flags(argc, argv, [&](const mla::bench::MlaFlag& f) {
    const std::string& k = f.key;
    if (k == "--mla_tier") f.need(), o.tier = mla::axes::tier_from_string(f.val);
    else if (k == "--mla_quick") o.quick = true;
    else if (k == "--mla_kernels") f.need(), o.kernels = mla::bench::split_csv(f.val);
    else if (k == "--mla_points") f.need(), o.points = mla::bench::split_csv(f.val);
    else if (k == "--mla_plugin") f.need(), o.plugins.push_back(f.val);
    else if (k == "--mla_python") f.need(), o.pythons.push_back(f.val);
    else if (k == "--mla_python_exe") f.need(), o.python_exe = f.val;
    else if (k == "--mla_threads") o.threads = static_cast<int>(f.num(1));
    else if (k == "--mla_stream_mib") o.stream_mib = static_cast<std::size_t>(f.num(1));
    else if (k == "--mla_ceiling_reps") o.ceiling_reps = static_cast<int>(f.num(1));
    else if (k == "--mla_no_flush") o.flush = false;
    else if (k == "--mla_max_mem_gib") o.max_mem_gib = f.num(0.001);
    else if (k == "--mla_list") o.list = true;
    else return false;
    return true;
  });
  return o;  // --mla_quick keeps an explicit --mla_tier (default cpu_quick either way)
}

std::string fmt_si(double v) { return fmt::format("{:.6g}", v); }

// Which host ceilings judge an implementation. Device implementations get none here (the GPU
// half gives the `cuda` ones their device's roofs) rather than a CPU number that would make a
// GPU look 100x past its roof.
mla::bench::Roof roof_for(const mla::KernelInfo& info, const CeilingSet& c) {
  mla::bench::Roof r;
  if (info.backend != "cpu") return r;
  r.bw_name = "read_bw";  // the kernels mostly read: the read-only probe is their bandwidth roof
  r.bw = c.read_bw;
  if (info.out_dtype == mla::OutDType::f64) {
    r.peak = c.fma_f64;
    r.peak_name = "fma_f64";
  } else {
    // fp32 and bf16 CPU implementations compute in fp32.
    r.peak = c.fma_f32;
    r.peak_name = "fma_f32";
  }
  return r;
}

// One axis point's inputs and one implementation's prepared state, kept across Google
// Benchmark's repeated calls of the same benchmark (it calls the function once per trial and
// repetition); replaced when the next point or implementation comes.
struct CaseCache {
  std::string point;
  std::optional<mla::axes::SyntheticInputs> inputs;
  std::string prepared_key;
  std::unique_ptr<mla::PreparedAttention> prepared;

  const mla::axes::SyntheticInputs& get_inputs(const mla::axes::AxisPoint& p) {
    if (point != p.name || !inputs) {
      prepared.reset();
      prepared_key.clear();
      inputs.reset();
      point.clear();
      const auto t0 = Clock::now();
      inputs.emplace(mla::axes::build_inputs(p));
      point = p.name;
      std::cerr << fmt::format("[mla-bench] built inputs of {} ({:.1f} MiB) in {:.2f} s\n", p.name,
                               static_cast<double>(mla::axes::footprint(p).total()) / (1 << 20),
                               std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return *inputs;
  }
  mla::PreparedAttention& get_prepared(const mla::AttentionImpl& impl, const mla::axes::AxisPoint& p) {
    const std::string key = impl.info().name + "/" + p.name;
    if (prepared_key != key || !prepared) {
      prepared.reset();
      prepared = impl.prepare(get_inputs(p).view());
      prepared_key = key;
    }
    return *prepared;
  }
};

CaseCache g_cache;
mla::bench::PointJudge g_judge;

struct KernelCase {
  const mla::AttentionImpl* impl;
  const mla::axes::AxisPoint* point;
  const CeilingSet* ceilings;
  mla::bench::CacheFlusher* flusher;  // nullptr: no flush
  std::size_t flush_min_bytes;        // points with smaller inputs are timed with warm caches
  std::size_t mem_budget;
  int threads;                        // threads the CPU implementations use (--mla_threads)
  // An external kernel's own answer on the point's shape and scale format (nullptr: none).
  const mla::certify::ExternalBenchKernel* external = nullptr;
  bool overhead = false;  // a calling path with an empty kernel: timed, never judged
  bool out_of_process = false;  // computes in another process (a Python kernel's door child)
};

using mla::bench::process_cpu_seconds;

void bench_kernel(benchmark::State& st, KernelCase kc) {
  const mla::AttentionImpl& impl = *kc.impl;
  const mla::axes::AxisPoint& p = *kc.point;
  if (auto why = impl.unavailable()) {
    st.SkipWithError(("unavailable: " + *why).c_str());
    return;
  }
  if (auto why = impl.check(p.shape)) {
    st.SkipWithError(("unsupported: " + *why).c_str());
    return;
  }
  if (kc.external && kc.external->claim) {
    const auto scale = p.shape.cache_format == mla::CacheFormat::fp8 ? std::optional<mla::ScaleFmt>(p.scale_fmt) : std::nullopt;
    if (auto why = kc.external->claim(p.shape, scale)) {
      st.SkipWithError(("unsupported: the kernel's can_implement: " + *why).c_str());
      return;
    }
  }
  const auto fp = mla::axes::footprint(p);
  if (fp.peak() > kc.mem_budget / 4) {
    st.SkipWithError(fmt::format("too large for this machine: inputs {:.2f} GiB > a quarter of the {:.2f} GiB budget",
                                 static_cast<double>(fp.peak()) / (1 << 30), static_cast<double>(kc.mem_budget) / (1 << 30))
                         .c_str());
    return;
  }
  try {
    const mla::AttnInputs in = g_cache.get_inputs(p).view();
    mla::PreparedAttention& run = g_cache.get_prepared(impl, p);
    if (!kc.overhead) {
      if (auto why = g_judge.failure(impl, run, p.name, in)) {
        st.SkipWithError(why->c_str());
        return;
      }
    }
    // The byte/FLOP model of exactly the call timed below: one run() over `in`.
    const mla::CostModel cost = impl.cost(in);
    // Host caches only: a device kernel's L2 would need a device-side flush, which this binary
    // does not have yet, so device timings are warm-L2 (recorded in the label below). Tiny
    // points (the edges) are timed warm too: evicting the LLC costs milliseconds, so a cold
    // measurement of a microsecond call would spend minutes flushing for no roofline value.
    mla::bench::CacheFlusher* flusher =
        impl.info().backend == "cpu" && fp.total() >= kc.flush_min_bytes ? kc.flusher : nullptr;
    double seconds = 0, cpu_seconds = 0;
    // The whole loop, flushes included, against what the machine did meanwhile (machine_load).
    const mla::bench::MachineCpu m0 = mla::bench::machine_cpu();
    const double loop_c0 = process_cpu_seconds();
    const auto loop_t0 = Clock::now();
    for (auto _ : st) {
      if (flusher) flusher->flush();
      const double c0 = process_cpu_seconds();
      const auto t0 = Clock::now();
      try {
        run.run();
        run.synchronize();
      } catch (const std::exception& e) {
        // Inside the loop, so Google Benchmark ends the run cleanly (its documented pattern).
        st.SkipWithError((std::string("error in run(): ") + e.what()).c_str());
        break;
      }
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      cpu_seconds += process_cpu_seconds() - c0;
      st.SetIterationTime(dt);
      seconds += dt;
    }
    const double loop_wall = std::chrono::duration<double>(Clock::now() - loop_t0).count();
    const double loop_cpu = process_cpu_seconds() - loop_c0;
    const mla::bench::MachineLoad load = mla::bench::machine_load(m0, mla::bench::machine_cpu(), loop_cpu, loop_wall);
    if (st.error_occurred()) return;
    using C = benchmark::Counter;
    const std::string bound = mla::bench::roofline_counters(st, cost, seconds, roof_for(impl.info(), *kc.ceilings));
    st.counters["cold_cache"] = C(flusher ? 1.0 : 0.0);
    // CPU time the process got during the timed calls per wall second and thread: below 1 the
    // implementation was descheduled (a busy machine), so its times overstate its cost.
    // A Python kernel computes in the door's child, whose CPU time this process does not see: no
    // CPU figures for it rather than a share of 0 that would read as "descheduled".
    const bool own_cpu = impl.info().backend == "cpu" && !kc.out_of_process;
    if (own_cpu && seconds > 0)
      st.counters["cpu_share"] = C(cpu_seconds / (seconds * kc.threads));
    // Who else had the CPUs while this row ran: other processes' work in CPUs' worth, the
    // hypervisor's steal, and the fraction of the time a runnable task waited for a CPU. A
    // cpu_share below 1 with others_cpus near 0 is ours (a serial section, an imbalance).
    if (own_cpu && load.ok) {
      st.counters["others_cpus"] = C(load.others_cpus);
      st.counters["steal_cpus"] = C(load.steal_cpus);
      if (load.psi) st.counters["cpu_wait"] = C(load.cpu_wait);
    }
    // The FLOP rate per CPU second the process got, against the FMA probe's rate per CPU second
    // (a core's peak): what the implementation reaches on the cores it was given. On a shared machine the wall
    // rate (pct_of_flop_ceiling) also counts the time other processes held the cores; this one
    // does not, so the two together tell a slow kernel from a busy machine. Not a substitute
    // for the wall rate: the report's % of ceiling stays the wall one.
    if (own_cpu && cpu_seconds > 0) {
      const bool f64 = impl.info().out_dtype == mla::OutDType::f64;
      const double per_cpu = f64 ? kc.ceilings->fma_f64_per_cpu_second : kc.ceilings->fma_f32_per_cpu_second;
      if (per_cpu > 0)
        st.counters["pct_of_flop_ceiling_per_cpu_second"] =
            C(100.0 * cost.flops * static_cast<double>(st.iterations()) / cpu_seconds / per_cpu);
    }
    if (!bound.empty()) {
      st.SetLabel(fmt::format("{}{}", bound, flusher ? "" : "; warm caches"));
    } else {
      st.SetLabel(fmt::format("no ceiling: none measured for backend {} in this run; device caches not flushed",
                              impl.info().backend));
    }
  } catch (const mla::UnsupportedError& e) {
    st.SkipWithError((std::string("unsupported: ") + e.what()).c_str());
  } catch (const std::exception& e) {
    st.SkipWithError((std::string("error: ") + e.what()).c_str());
  }
}

// --- the ceiling probes as benchmarks (rows in the same JSON) --------------------------------

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

void print_table() {
  std::cout << "name\taxis\ttiers\tbatch\ts_q\theads\tpage_size\ttopk\tcache\tseqlen_max\ttotal_tokens\tinput_MiB\tscaled_from\n";
  for (const auto& p : mla::axes::catalog()) {
    std::string tiers;
    for (auto t : {mla::axes::cpu_quick, mla::axes::cpu_full, mla::axes::gpu})
      if (p.in(t)) {
        if (!tiers.empty()) tiers += ',';
        tiers += mla::axes::to_string(t);
      }
    const auto j = mla::bench::point_json(p);
    std::cout << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.1f}\t{}\n", p.name, j["axis"].get<std::string>(), tiers,
                             p.shape.batch, p.shape.s_q, p.shape.heads, p.shape.page_size, p.shape.topk,
                             j["cache_format"].get<std::string>(), j["seqlen_max"].get<int>(), p.total_tokens(),
                             static_cast<double>(mla::axes::footprint(p).total()) / (1 << 20), p.scaled_from);
  }
}

// The kernels and the points of this run, as --mla_kernel / --mla_point / --mla_tier chose them;
// false (said on stderr) for a name that does not exist.
bool select_kernels_and_points(const Options& o, std::vector<const mla::AttentionImpl*>& impls,
                               std::vector<const mla::axes::AxisPoint*>& points) {
  // The production shapes are for device kernels: the fp64 CPU reference would take minutes per
  // call there, so tier gpu leaves the CPU implementations out unless they are asked for.
  const bool device_only = o.points.empty() && o.tier == mla::axes::gpu && o.kernels.empty();
  for (const auto& k : mla::Registry::instance().attention())
    if (o.kernels.empty() ? !(device_only && k->info().backend == "cpu")
                          : std::find(o.kernels.begin(), o.kernels.end(), k->info().name) != o.kernels.end())
      impls.push_back(k.get());
  for (const auto& name : o.kernels)
    if (!mla::Registry::instance().find(name)) {
      std::cerr << "mla-bench: no implementation named '" << name << "'\n";
      return false;
    }

  if (!o.points.empty()) {
    for (const auto& name : o.points) {
      const auto* p = mla::axes::find(name);
      if (!p) {
        std::cerr << "mla-bench: no axis point named '" << name << "' (see --mla_list)\n";
        return false;
      }
      points.push_back(p);
    }
  } else {
    points = mla::axes::select(o.tier);
  }
  return true;
}

// The kernels of --mla_plugin and --mla_python, opened in the order given. Throws
// mla::certify::UsageError naming the library or spec that cannot be opened.
std::vector<mla::certify::ExternalBenchKernel> open_external_kernels(const Options& o) {
  std::vector<mla::certify::ExternalBenchKernel> out;
  for (const auto& lib : o.plugins) out.push_back(mla::certify::open_plugin_for_bench(lib));
  if (!o.pythons.empty()) {
    // The door is found beside this executable or in the source tree it was built from.
    const auto self = std::filesystem::read_symlink("/proc/self/exe");
    for (const auto& spec : o.pythons) out.push_back(mla::certify::open_python_for_bench(spec, self, o.python_exe));
  }
  return out;
}

// The run's host context, everything a report or a regression gate needs to interpret the rows
// (machine, threads, ISA, cache flush, ceilings, the load during the FMA probes); returns the
// ceilings' table, which the device half extends before it is written.
nlohmann::ordered_json add_run_context(const Options& o, const CeilingSet& ceilings, std::size_t llc,
                                       std::size_t flush_bytes, std::size_t flush_min_bytes) {
  benchmark::AddCustomContext("mla_bench_format", "1");
  benchmark::AddCustomContext("mla_cpu_model", mla::bench::cpu_model());
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
                              "manual time of run()+synchronize() only; inputs, prepare and the cache flush are untimed");
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
  for (const auto& c : ceilings.all) {
    benchmark::AddCustomContext("mla_ceiling_" + c.key, fmt_si(c.value));
    cj[c.key] = {{"value", c.value}, {"unit", c.unit}, {"method", c.method}};
  }
  cj["threads"] = ceilings.threads;
  // What the FMA probes got and what else ran meanwhile (bench_host.hpp, machine_load): a wall
  // ceiling below threads x the per-CPU-second one with others_cpus > 0 was measured on a
  // machine others shared; with others_cpus near 0 it is the cores' own scaling.
  nlohmann::ordered_json lj = nlohmann::ordered_json::object();
  for (const auto& pl : ceilings.probe_loads) {
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

// The ceiling probes as benchmarks, with the kernels' thread count.
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

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = take_options(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "mla-bench: " << e.what() << "\n";
    return 2;
  }
  if (o.list) {
    print_table();
    return 0;
  }
  try {
    // One thread count for the kernels (they read mla::threads()) and the ceilings below, so a
    // % of ceiling compares like with like.
    if (o.threads > 0) mla::set_threads(o.threads);
    o.threads = mla::threads();
    (void)mla::simd_isa();  // a malformed MLA_ISA is a usage error here, not an error row
  } catch (const std::exception& e) {
    std::cerr << "mla-bench: " << e.what() << "\n";
    return 2;
  }
  if (!mla::bench::init_google_benchmark(argc, argv, o.quick)) return 2;

  try {
    mla::register_builtin_kernels();
  } catch (const std::exception& e) {
    std::cerr << "mla-bench: registering kernels failed: " << e.what() << "\n";
    return 1;
  }
  std::vector<const mla::AttentionImpl*> impls;
  std::vector<const mla::axes::AxisPoint*> points;
  if (!select_kernels_and_points(o, impls, points)) return 2;
  // External kernels after the built-ins, each followed by its calling path's overhead row.
  std::vector<mla::certify::ExternalBenchKernel> externals;
  try {
    externals = open_external_kernels(o);
  } catch (const std::exception& e) {
    std::cerr << "mla-bench: " << e.what() << "\n";
    return 2;
  }
  std::map<const mla::AttentionImpl*, const mla::certify::ExternalBenchKernel*> external_of;
  for (const auto& e : externals) {
    impls.push_back(e.impl.get());
    impls.push_back(e.overhead.get());
    external_of[e.impl.get()] = external_of[e.overhead.get()] = &e;
  }
  auto is_overhead = [&](const mla::AttentionImpl* k) {
    const auto it = external_of.find(k);
    return it != external_of.end() && it->second->overhead.get() == k;
  };

  const std::size_t llc = mla::bench::last_level_cache_bytes();
  const std::size_t stream_bytes = o.stream_mib << 20;
  if (llc && stream_bytes < 4 * llc)
    std::cerr << fmt::format("[mla-bench] warning: STREAM arrays ({} MiB) are < 4x the last-level cache ({} MiB)\n",
                             o.stream_mib, llc >> 20);
  const CeilingSet ceilings = mla::bench::measure_ceilings(o.threads, stream_bytes, o.ceiling_reps);
  std::optional<mla::bench::CacheFlusher> flusher;
  if (o.flush) flusher.emplace(std::max<std::size_t>(2 * llc, std::size_t{32} << 20));
  const std::size_t avail = mla::bench::available_memory_bytes();
  const std::size_t budget = o.max_mem_gib > 0 ? static_cast<std::size_t>(o.max_mem_gib * (1u << 30))
                                               : (avail ? avail / 2 : std::size_t{4} << 30);

  std::vector<const mla::AttentionImpl*> device_impls;  // timed by the GPU half, not bench_kernel
#if MLA_BENCH_WITH_GPU
  std::optional<mla::device::GpuBenchSetup> gpu;
  const bool wants_device =
      std::any_of(impls.begin(), impls.end(), [](const auto* k) { return k->info().backend == "cuda"; });
  if (wants_device && !mla::cuda::unavailable_reason()) {
    mla::device::GpuBenchOptions go;
    go.flush_l2 = o.flush;
    go.host_budget_bytes = budget;
    try {
      gpu.emplace(mla::device::prepare_gpu_bench(go));
    } catch (const std::exception& e) {
      std::cerr << "mla-bench: measuring the device ceilings failed: " << e.what() << "\n";
      return 1;
    }
    for (const auto* k : impls)
      if (k->info().backend == "cuda") device_impls.push_back(k);
  }
#endif
  auto on_device = [&](const mla::AttentionImpl* k) {
    return std::find(device_impls.begin(), device_impls.end(), k) != device_impls.end();
  };

  // Below this the points are the edges (sub-millisecond calls on < 1 MiB of inputs), where a
  // per-call eviction costs 10-100x the call and the roofline has nothing to learn.
  constexpr std::size_t flush_min_bytes = std::size_t{2} << 20;
  nlohmann::ordered_json cj = add_run_context(o, ceilings, llc, flusher ? flusher->bytes() : 0, flush_min_bytes);
#if MLA_BENCH_WITH_GPU
  if (gpu) {
    const nlohmann::ordered_json gj = mla::device::ceilings_json(*gpu);  // named: items() views it
    for (const auto& el : gj.items()) cj[el.key()] = el.value();
    mla::device::add_gpu_context(*gpu);
  }
#endif
  benchmark::AddCustomContext("mla_device_half", MLA_BENCH_WITH_GPU ? "linked (suites/device)" : "not built (no CUDA)");
  benchmark::AddCustomContext("mla_ceilings", cj.dump());
  nlohmann::ordered_json pj = nlohmann::ordered_json::object();
  for (const auto* p : points) pj[p->name] = mla::bench::point_json(*p);
  benchmark::AddCustomContext("mla_points", pj.dump());
  nlohmann::ordered_json kj = nlohmann::ordered_json::array();
  for (const auto* k : impls) {
#if MLA_BENCH_WITH_GPU
    if (on_device(k)) {
      kj.push_back(mla::device::kernel_json(*k));
      continue;
    }
#endif
    // Which measured ceilings judge it (keys of mla_ceilings); null: none measured.
    auto j = mla::bench::kernel_json(*k, roof_for(k->info(), ceilings));
    if (const auto it = external_of.find(k); it != external_of.end()) {
      j["origin"] = it->second->origin;
      if (is_overhead(k)) j["overhead_of"] = it->second->impl->info().name;
    }
    kj.push_back(std::move(j));
  }
  benchmark::AddCustomContext("mla_kernels", kj.dump());

  register_ceiling_benchmarks(o.threads, stream_bytes);

  // Kernels x points, point-major so each point's inputs are built once for all kernels.
  for (const auto* p : points)
    for (const auto* k : impls)
      if (!on_device(k))
        benchmark::RegisterBenchmark(fmt::format("mla/{}/{}", k->info().name, p->name).c_str(), bench_kernel,
                                     KernelCase{k, p, &ceilings, flusher ? &*flusher : nullptr, flush_min_bytes, budget, o.threads,
                                                external_of.count(k) ? external_of.at(k) : nullptr, is_overhead(k),
                                                external_of.count(k) && external_of.at(k)->origin.value("kind", "") == "python"})
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
#if MLA_BENCH_WITH_GPU
  if (gpu) {
    mla::device::register_gpu_ceiling_benchmarks(*gpu);
    mla::device::register_gpu_kernel_benchmarks(*gpu, device_impls, points);
    mla::device::register_gpu_clock_row();  // last: the clocks after the run
  }
#endif

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::cerr << fmt::format("[mla-bench] kernels judged before timing; {} point truths computed in {:.1f} s (untimed)\n",
                           g_judge.truths(), g_judge.truth_seconds());
  g_cache = CaseCache{};
  g_judge = mla::bench::PointJudge{};
#if MLA_BENCH_WITH_GPU
  if (gpu) mla::device::release_gpu_bench_cache();  // before the CUDA runtime is torn down at exit
#endif
  return 0;
}
