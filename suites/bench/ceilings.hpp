// Measured machine ceilings for the CPU roofline: memory bandwidth (a STREAM-like read-only
// sum and triad) and peak arithmetic (an FMA loop per ISA and an Eigen GEMM).
//
// Why measured and not datasheet: a % of ceiling is only meaningful against what this machine,
// in this VM, with this thread count, actually sustains (docs/field.md, "Measurement practice").
// Every probe exists twice: as a registered Google Benchmark (so its rows sit in the same JSON
// as the kernels and are tracked by the regression gate) and as `measure_*` here, run before
// the benchmarks so that the values can go into the JSON context and the kernels' counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_host.hpp"

namespace mla::bench {

// The instruction sets the FMA probe has a path for, best first.
enum class Isa { avx512, avx2_fma, sse2 };
const char* to_string(Isa i);
// The best ISA this CPU runs, and the best one the compiler was allowed to use for the kernels
// (the build's flags): a kernel compiled for sse2 cannot reach the avx512 peak.
Isa runtime_isa();
Isa build_isa();
// The ISA the host kernels' products run with (mla::simd_isa(): the best, unless MLA_ISA says).
Isa kernel_isa();

// One probe kernel, one thread, `n` elements or iterations; each returns a value that depends on
// all the work so the compiler cannot drop it.
double read_sum(const double* a, std::size_t n);
void triad(double* a, const double* b, const double* c, double s, std::size_t n);
// `iters` rounds of independent FMA chains; returns the FLOP count done via `flops`.
double fma_f64(Isa isa, int64_t iters, double* flops);
double fma_f32(Isa isa, int64_t iters, double* flops);
// C = A * B with n x n doubles (Eigen, the build's ISA): 2 n^3 FLOP.
struct Gemm {
  explicit Gemm(int n);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  double run();  // returns one element of C
  int n;
  double flops() const { return 2.0 * n * n * static_cast<double>(n); }

 private:
  struct Impl;
  Impl* impl_;
};

struct Ceiling {
  std::string key;     // context key suffix, e.g. "read_bw"
  std::string unit;    // "B/s" or "FLOP/s"
  double value = 0;    // best of the repetitions
  std::string method;  // one line: what was run
};

struct CeilingSet {
  int threads = 1;
  std::size_t stream_bytes = 0;  // size of each STREAM array
  std::vector<Ceiling> all;
  // The ones used for % of ceiling and the ridge point.
  double read_bw = 0, triad_bw = 0, fma_f64 = 0, fma_f32 = 0, gemm_f64 = 0;
  // The FMA probes' FLOPs per CPU second the process got (one core's peak, however busy the
  // machine was): the roof of pct_of_flop_ceiling_per_cpu_second.
  double fma_f64_per_cpu_second = 0, fma_f32_per_cpu_second = 0;
  // For the FMA probes' best wall repetition: the CPUs' worth the process got, and what the rest
  // of the machine did meanwhile (machine_load). A wall ceiling measured while others held a
  // core is below the machine's; this says so in the same JSON.
  struct ProbeLoad {
    std::string key;
    double own_cpus = 0;
    MachineLoad load;
  };
  std::vector<ProbeLoad> probe_loads;
};

// Runs every probe with `threads` threads (each thread its own slice or its own chains), best
// of `reps`. Progress goes to stderr.
CeilingSet measure_ceilings(int threads, std::size_t stream_bytes, int reps);

// Size of the last-level cache from sysfs (0 if unknown); the CPU model and MemAvailable are in
// bench_host.hpp.
std::size_t last_level_cache_bytes();

// Evicts the caches by writing and reading a buffer several times the LLC (untimed, between
// kernel calls) so that a kernel's bytes come from DRAM, like the ceiling they are compared to.
class CacheFlusher {
 public:
  explicit CacheFlusher(std::size_t bytes);
  void flush();
  std::size_t bytes() const { return buf_.size() * sizeof(double); }

 private:
  std::vector<double> buf_;
  double sink_ = 0;
};

}  // namespace mla::bench
