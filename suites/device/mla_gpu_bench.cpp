// mla-gpu-bench: the GPU ceilings and every registered CUDA implementation over the shared axes
// (tier `gpu` by default), timed with CUDA events and an L2 flush between calls.
//
//   mla-gpu-bench --mla_quick --benchmark_out=gpu.json --benchmark_out_format=json
//
// Own flags (removed before Google Benchmark sees the command line):
//   --mla_tier=gpu|cpu_quick|cpu_full   which axis points (default gpu)
//   --mla_points=a,b                    only these axis points (any tier)
//   --mla_kernels=a,b                   only these implementations (default: every backend "cuda" one)
//   --mla_quick                         unless given: --benchmark_repetitions=5 --benchmark_min_time=0.05
//   --mla_no_flush                      do not flush L2 between timed calls
//   --mla_ceiling_reps=N                timed repetitions of each context ceiling (default 10)
//   --mla_stream_mib=N                  read-probe buffer (the copy moves N/2 MiB each way; default 2048)
//   --mla_gemm_n=N                      m = n = k of the bf16 GEMM ceiling (default 8192)
//   --mla_max_mem_gib=X                 refuse points whose host inputs exceed X/4 GiB (default: half of
//                                       MemAvailable)
//   --mla_list                          print the selected points (TSV, the columns torch_side_by_side.py
//                                       reads) and exit; needs no GPU
//   --mla_probe                         print the GPU snapshot (JSON: name, driver, clocks, or why there
//                                       is no usable GPU) and exit 0, or 77 without a usable GPU
//   --mla_input_threads=N               threads that build the inputs (default: MLA_THREADS, else
//                                       every core)
//
// --benchmark_out=FILE (JSON) is written by this program, not by Google Benchmark: after the
// context and after every benchmark FILE is rewritten as a complete document of the rows so far
// (gpu_bench.hpp, incremental_json_reporter), with "mla_run": {"complete": ...} at the top, so
// a run stopped by a timeout keeps every finished row and says it did not finish.
//
// Exit status: 0 ran; 2 bad usage; 3 a row left the CUDA context unusable (the later rows say
// so; stderr names the row); 77 no usable CUDA device (the reason on stderr; the conventional
// "skipped" status, so CTest and suites/device/check.sh record a skip).
//
// The JSON has the layout mla-bench writes (reports/tools reads both): context mla_ceilings,
// mla_kernels (roof_bw / roof_peak name GPU ceilings), mla_points, plus mla_gpu* entries.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_host.hpp"
#include "bench_rows.hpp"
#include "gpu_bench.hpp"
#include "harness.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/cuda/device.hpp"
#include "mla/workloads/axes.hpp"
#include "mla/registry/registry.hpp"

namespace {

constexpr int kExitNoGpu = 77;

struct Options {
  mla::axes::Tier tier = mla::axes::gpu;
  bool quick = false, flush = true, list = false, probe = false;
  std::vector<std::string> kernels, points;
  int ceiling_reps = 10;
  std::size_t stream_mib = 2048;
  int gemm_n = 8192;
  double max_mem_gib = 0;
  int input_threads = 0;
  std::string json_out;  // --benchmark_out, when its format is JSON
};

Options take_options(int& argc, char** argv) {
  Options o;
  mla::bench::take_mla_flags(argc, argv, [&](const mla::bench::MlaFlag& f) {
    const std::string& k = f.key;
    if (k == "--mla_tier") f.need(), o.tier = mla::axes::tier_from_string(f.val);
    else if (k == "--mla_points") f.need(), o.points = mla::bench::split_csv(f.val);
    else if (k == "--mla_kernels") f.need(), o.kernels = mla::bench::split_csv(f.val);
    else if (k == "--mla_quick") o.quick = true;
    else if (k == "--mla_no_flush") o.flush = false;
    else if (k == "--mla_ceiling_reps") o.ceiling_reps = static_cast<int>(f.num(1));
    else if (k == "--mla_stream_mib") o.stream_mib = static_cast<std::size_t>(f.num(1));
    else if (k == "--mla_gemm_n") o.gemm_n = static_cast<int>(f.num(8));
    else if (k == "--mla_max_mem_gib") o.max_mem_gib = f.num(0.001);
    else if (k == "--mla_list") o.list = true;
    else if (k == "--mla_probe") o.probe = true;
    else if (k == "--mla_input_threads") o.input_threads = static_cast<int>(f.num(1));
    else return false;
    return true;
  });
  // --benchmark_out=FILE with the JSON format (the default) is taken here: the incremental
  // reporter writes FILE. Another format is left to Google Benchmark.
  std::string out, format = "json";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--benchmark_out=", 0) == 0) out = a.substr(16);
    if (a.rfind("--benchmark_out_format=", 0) == 0) format = a.substr(23);
  }
  if (!out.empty() && format == "json") {
    int w = 1;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.rfind("--benchmark_out=", 0) != 0 && a.rfind("--benchmark_out_format=", 0) != 0) argv[w++] = argv[i];
    }
    argc = w;
    argv[argc] = nullptr;
    o.json_out = out;
  }
  return o;
}

void print_list(const std::vector<const mla::axes::AxisPoint*>& points) {
  std::cout << "name\taxis\tbatch\ts_q\theads\tpage_size\ttopk\tcache\tseqlen_max\tseqlen_mean\tcausal\n";
  for (const auto* p : points) {
    const auto j = mla::bench::point_json(*p);
    std::cout << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n", p->name, j["axis"].get<std::string>(),
                             p->shape.batch, p->shape.s_q, p->shape.heads, p->shape.page_size, p->shape.topk,
                             j["cache_format"].get<std::string>(), j["seqlen_max"].get<int>(),
                             j["seqlen_mean"].get<double>(), p->shape.causal ? 1 : 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<const mla::axes::AxisPoint*> points;
  try {
    o = take_options(argc, argv);
    if (o.input_threads > 0) mla::gen::set_threads(o.input_threads);
    (void)mla::gen::threads();  // a malformed MLA_THREADS is a usage error, not a failure mid-run
    if (!o.points.empty()) {
      for (const auto& name : o.points) {
        const auto* p = mla::axes::find(name);
        if (!p) throw mla::Error("no axis point named '" + name + "'");
        points.push_back(p);
      }
    } else {
      points = mla::axes::select(o.tier);
    }
  } catch (const std::exception& e) {
    std::cerr << "mla-gpu-bench: " << e.what() << "\n";
    return 2;
  }
  if (o.list) {
    print_list(points);
    return 0;
  }
  if (o.probe) {
    const auto snap = mla::cuda::snapshot_gpu();
    std::cout << mla::cuda::to_json(snap) << "\n";
    return snap.available ? 0 : kExitNoGpu;
  }

  if (!mla::bench::init_google_benchmark(argc, argv, o.quick)) return 2;

  try {
    mla::register_builtin_kernels();
  } catch (const std::exception& e) {
    std::cerr << "mla-gpu-bench: registering kernels failed: " << e.what() << "\n";
    return 1;
  }
  std::vector<const mla::AttentionImpl*> impls;
  for (const auto& name : o.kernels) {
    const auto* k = mla::Registry::instance().find(name);
    if (!k) {
      std::cerr << "mla-gpu-bench: no implementation named '" << name << "'\n";
      return 2;
    }
    impls.push_back(k);
  }
  if (o.kernels.empty())
    for (const auto& k : mla::Registry::instance().attention())
      if (k->info().backend == "cuda") impls.push_back(k.get());

  if (auto why = mla::cuda::unavailable_reason()) {
    std::cerr << "mla-gpu-bench: skipped: " << *why << "\n";
    return kExitNoGpu;
  }

  mla::device::GpuBenchOptions go;
  go.flush_l2 = o.flush;
  go.ceilings.reps = o.ceiling_reps;
  go.ceilings.stream_bytes = o.stream_mib << 20;
  go.ceilings.gemm_n = o.gemm_n;
  const std::size_t avail = mla::bench::available_memory_bytes();
  go.host_budget_bytes = o.max_mem_gib > 0 ? static_cast<std::size_t>(o.max_mem_gib * (1u << 30)) : avail / 2;
  mla::device::GpuBenchSetup setup;
  try {
    setup = mla::device::prepare_gpu_bench(go);
  } catch (const std::exception& e) {
    std::cerr << "mla-gpu-bench: " << e.what() << "\n";
    return 1;
  }

  benchmark::AddCustomContext("mla_bench_format", "1");
  // mla_cpu_model keeps its meaning (the host) because the regression gate keys machines on it;
  // the GPU is named by mla_gpu_name.
  benchmark::AddCustomContext("mla_cpu_model", mla::bench::cpu_model());
  benchmark::AddCustomContext("mla_threads", "1");
  benchmark::AddCustomContext("mla_input_threads", std::to_string(mla::gen::threads()));
  benchmark::AddCustomContext("mla_input_generator", std::string("splitmix64-uniform-v1, ") +
                                                         mla::gen::to_string(mla::gen::best_isa()) + " kernel");
  benchmark::AddCustomContext("mla_hardware_threads", std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("mla_tier", o.points.empty() ? mla::axes::to_string(o.tier) : "explicit points");
  mla::device::add_gpu_context(setup);
  benchmark::AddCustomContext("mla_ceilings", mla::device::ceilings_json(setup).dump());
  nlohmann::ordered_json pj = nlohmann::ordered_json::object();
  for (const auto* p : points) pj[p->name] = mla::bench::point_json(*p);
  benchmark::AddCustomContext("mla_points", pj.dump());
  nlohmann::ordered_json kj = nlohmann::ordered_json::array();
  for (const auto* k : impls) kj.push_back(mla::device::kernel_json(*k));
  benchmark::AddCustomContext("mla_kernels", kj.dump());

  mla::device::register_gpu_ceiling_benchmarks(setup);
  mla::device::register_gpu_kernel_benchmarks(setup, impls, points);
  mla::device::register_gpu_format_ratio_rows(impls, points);
  mla::device::register_gpu_clock_row();
  if (o.json_out.empty()) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    benchmark::ConsoleReporter console(benchmark::ConsoleReporter::OO_None);
    const auto file = mla::device::incremental_json_reporter(o.json_out, [] {
      const auto why = mla::device::context_poisoned();
      return why ? *why : std::string();
    });
    const auto tee = mla::device::tee_reporter({&console, file.get()});
    benchmark::RunSpecifiedBenchmarks(tee.get());
  }
  benchmark::Shutdown();
  mla::device::release_gpu_bench_cache();
  if (const auto why = mla::device::context_poisoned()) {
    std::cerr << "mla-gpu-bench: stopped timing at " << *why << "\n";
    return 3;
  }
  return 0;
}
