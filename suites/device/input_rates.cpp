// mla-input-rates: how fast this machine builds benchmark inputs, the host-side work of the
// device check's bench step (suites/device/README.md, "Time plan"), as a Google Benchmark.
//
//   mla-input-rates [--mla_points=a,b] [--mla_threads=N] [--mla_gen_mib=N] [--benchmark_* ...]
//
// Rows:
//   gen/fill_bf16/<isa>/threads:<t>, gen/fill_f64/<isa>/threads:<t>
//       the counter-based generator (mla/core/generator.hpp) filling a buffer of --mla_gen_mib
//       MiB (default 128), for every kernel this CPU runs (scalar, avx2, avx512) at 1 thread and
//       at every thread (--mla_threads, MLA_THREADS, default all cores); items_per_second is
//       elements per second
//   inputs/<point>   axes::build_inputs of each --mla_points point once (default: none), as the
//       bench builds them: q, the paged cache (FP8 points: generated in bf16, then quantized per
//       token), block table, indices; counters seconds, bytes (host footprint) and elements
//       (generated values)
//
// Needs no GPU. Exit status 0 ran, 2 bad usage.
#include <benchmark/benchmark.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench_host.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/workloads/axes.hpp"

namespace {

namespace gen = mla::gen;
namespace axes = mla::axes;

struct Options {
  std::vector<std::string> points;
  int threads = 0;
  std::size_t gen_mib = 128;
};

template <class T>
void bench_fill(benchmark::State& st, gen::Isa isa, int threads, std::size_t mib) {
  std::vector<T> buf((mib << 20) / sizeof(T));
  const gen::FillOptions o{.isa = isa, .threads = threads};
  uint64_t seed = 1;
  for (auto _ : st) {
    if constexpr (sizeof(T) == 2) {
      gen::fill_bf16(seed++, 7, 0.0, 1.0, buf, o);
    } else {
      gen::fill_f64(seed++, 7, 0.0, 1.0, buf, o);
    }
    benchmark::DoNotOptimize(buf.data());
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(static_cast<int64_t>(buf.size()) * st.iterations());
  st.SetBytesProcessed(static_cast<int64_t>(buf.size() * sizeof(T)) * st.iterations());
  st.SetLabel(fmt::format("{} MiB, {} kernel, {} thread(s)", mib, gen::to_string(isa), threads));
}

// Generated values of a point: q and the whole paged bf16 cache (unused slots included: they are
// generated, then poisoned).
double generated_elements(const axes::AxisPoint& p) {
  const auto& s = p.shape;
  return static_cast<double>(s.batch) * s.s_q * s.heads * s.d_qk +
         static_cast<double>(s.num_blocks) * s.page_size * s.d_qk;
}

void bench_inputs(benchmark::State& st, const axes::AxisPoint* p) {
  double seconds = 0;
  for (auto _ : st) {
    const auto t0 = std::chrono::steady_clock::now();
    axes::SyntheticInputs in = axes::build_inputs(*p);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(in.kv_cache.data());
  }
  using C = benchmark::Counter;
  const double bytes = static_cast<double>(axes::footprint(*p).total());
  st.counters["seconds"] = C(seconds);
  st.counters["bytes"] = C(bytes);
  st.counters["elements"] = C(generated_elements(*p));
  st.counters["bytes_per_second_built"] = C(seconds > 0 ? bytes / seconds : 0);
  st.SetLabel(fmt::format("{} cache, {:.0f} MiB, {} threads", mla::to_string(p->shape.cache_format), bytes / (1 << 20),
                          gen::threads()));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<const axes::AxisPoint*> points;
  try {
    mla::bench::take_mla_flags(argc, argv, [&](const mla::bench::MlaFlag& f) {
      if (f.key == "--mla_points") f.need(), o.points = mla::bench::split_csv(f.val);
      else if (f.key == "--mla_threads") o.threads = static_cast<int>(f.num(1));
      else if (f.key == "--mla_gen_mib") o.gen_mib = static_cast<std::size_t>(f.num(1));
      else return false;
      return true;
    });
    for (const auto& name : o.points) {
      const auto* p = axes::find(name);
      if (!p) throw mla::Error("no axis point named '" + name + "'");
      points.push_back(p);
    }
    if (o.threads > 0) gen::set_threads(o.threads);
    (void)gen::threads();  // a malformed MLA_THREADS is a usage error here, not mid-run
  } catch (const std::exception& e) {
    std::cerr << "mla-input-rates: " << e.what() << "\n";
    return 2;
  }
  if (!mla::bench::init_google_benchmark(argc, argv, false)) return 2;

  const int all = gen::threads();
  benchmark::AddCustomContext("mla_gen_best_isa", gen::to_string(gen::best_isa()));
  benchmark::AddCustomContext("mla_gen_threads", std::to_string(all));
  benchmark::AddCustomContext("mla_hardware_threads", std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("mla_cpu_model", mla::bench::cpu_model());
  std::vector<int> counts = {1};
  if (all > 1) counts.push_back(all);
  for (gen::Isa isa : {gen::Isa::scalar, gen::Isa::avx2, gen::Isa::avx512}) {
    if (!gen::supported(isa)) continue;
    for (int t : counts) {
      benchmark::RegisterBenchmark(fmt::format("gen/fill_bf16/{}/threads:{}", gen::to_string(isa), t).c_str(),
                                   bench_fill<uint16_t>, isa, t, o.gen_mib)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.3);
      benchmark::RegisterBenchmark(fmt::format("gen/fill_f64/{}/threads:{}", gen::to_string(isa), t).c_str(),
                                   bench_fill<double>, isa, t, o.gen_mib)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.3);
    }
  }
  for (const auto* p : points)
    benchmark::RegisterBenchmark(fmt::format("inputs/{}", p->name).c_str(), bench_inputs, p)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(1)
        ->Repetitions(1);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
