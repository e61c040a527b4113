#include "ceilings.hpp"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <latch>
#include <memory>
#include <sstream>
#include <thread>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "mla/core/isa.hpp"

namespace mla::bench {

const char* to_string(Isa i) {
  switch (i) {
    case Isa::avx512: return "avx512";
    case Isa::avx2_fma: return "avx2_fma";
    case Isa::sse2: return "sse2";
  }
  return "?";
}

namespace {

Isa from_simd(mla::SimdIsa i) {
  switch (i) {
    case mla::SimdIsa::avx512: return Isa::avx512;
    case mla::SimdIsa::avx2: return Isa::avx2_fma;
    case mla::SimdIsa::sse2: break;
  }
  return Isa::sse2;
}

}  // namespace

// The host code's one CPU detection (mla/core/isa.hpp).
Isa runtime_isa() { return from_simd(mla::cpu_best_isa()); }

Isa kernel_isa() { return from_simd(mla::simd_isa()); }

Isa build_isa() {
#if defined(__AVX512F__)
  return Isa::avx512;
#elif defined(__AVX2__) && defined(__FMA__)
  return Isa::avx2_fma;
#else
  return Isa::sse2;
#endif
}

namespace {

// GCC vector extension: lowered to whatever the build's ISA has, so the read probe issues wide
// loads without intrinsics and without -ffast-math (which a plain reduction would need to vectorize).
typedef double v4d __attribute__((vector_size(32)));
typedef double v4d_unaligned __attribute__((vector_size(32), aligned(8)));

// The FMA chains: acc = acc * m + a converges to a / (1 - m) = 1, so no overflow, no denormals.
// Enough independent chains to cover FMA latency x pipes on current x86 cores (4 x 2).
constexpr double kM = 0.999999, kA = 1e-6;

__attribute__((target("avx512f"))) double fma_f64_avx512(int64_t iters) {
  constexpr int K = 16;
  __m512d acc[K];
  const __m512d m = _mm512_set1_pd(kM), a = _mm512_set1_pd(kA);
  for (int k = 0; k < K; ++k) acc[k] = _mm512_set1_pd(static_cast<double>(k) * 1e-3);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < K; ++k) acc[k] = _mm512_fmadd_pd(acc[k], m, a);
  __m512d s = acc[0];
  for (int k = 1; k < K; ++k) s = _mm512_add_pd(s, acc[k]);
  alignas(64) double out[8];
  _mm512_store_pd(out, s);
  double r = 0;
  for (double v : out) r += v;
  return r;
}
constexpr double kFlopsPerIterF64Avx512 = 16 * 8 * 2;

__attribute__((target("avx2,fma"))) double fma_f64_avx2(int64_t iters) {
  constexpr int K = 12;
  __m256d acc[K];
  const __m256d m = _mm256_set1_pd(kM), a = _mm256_set1_pd(kA);
  for (int k = 0; k < K; ++k) acc[k] = _mm256_set1_pd(static_cast<double>(k) * 1e-3);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < K; ++k) acc[k] = _mm256_fmadd_pd(acc[k], m, a);
  __m256d s = acc[0];
  for (int k = 1; k < K; ++k) s = _mm256_add_pd(s, acc[k]);
  alignas(32) double out[4];
  _mm256_store_pd(out, s);
  return out[0] + out[1] + out[2] + out[3];
}
constexpr double kFlopsPerIterF64Avx2 = 12 * 4 * 2;

double fma_f64_sse2(int64_t iters) {
  constexpr int K = 12;
  __m128d acc[K];
  const __m128d m = _mm_set1_pd(kM), a = _mm_set1_pd(kA);
  for (int k = 0; k < K; ++k) acc[k] = _mm_set1_pd(static_cast<double>(k) * 1e-3);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < K; ++k) acc[k] = _mm_add_pd(_mm_mul_pd(acc[k], m), a);
  __m128d s = acc[0];
  for (int k = 1; k < K; ++k) s = _mm_add_pd(s, acc[k]);
  alignas(16) double out[2];
  _mm_store_pd(out, s);
  return out[0] + out[1];
}
constexpr double kFlopsPerIterF64Sse2 = 12 * 2 * 2;

constexpr float kMf = 0.9999f, kAf = 1e-4f;

__attribute__((target("avx512f"))) double fma_f32_avx512(int64_t iters) {
  constexpr int K = 16;
  __m512 acc[K];
  const __m512 m = _mm512_set1_ps(kMf), a = _mm512_set1_ps(kAf);
  for (int k = 0; k < K; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k) * 1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < K; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, a);
  __m512 s = acc[0];
  for (int k = 1; k < K; ++k) s = _mm512_add_ps(s, acc[k]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  double r = 0;
  for (float v : out) r += v;
  return r;
}
constexpr double kFlopsPerIterF32Avx512 = 16 * 16 * 2;

__attribute__((target("avx2,fma"))) double fma_f32_avx2(int64_t iters) {
  constexpr int K = 12;
  __m256 acc[K];
  const __m256 m = _mm256_set1_ps(kMf), a = _mm256_set1_ps(kAf);
  for (int k = 0; k < K; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k) * 1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < K; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, a);
  __m256 s = acc[0];
  for (int k = 1; k < K; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  double r = 0;
  for (float v : out) r += v;
  return r;
}
constexpr double kFlopsPerIterF32Avx2 = 12 * 8 * 2;

double fma_f32_sse2(int64_t iters) {
  constexpr int K = 12;
  __m128 acc[K];
  const __m128 m = _mm_set1_ps(kMf), a = _mm_set1_ps(kAf);
  for (int k = 0; k < K; ++k) acc[k] = _mm_set1_ps(static_cast<float>(k) * 1e-3f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < K; ++k) acc[k] = _mm_add_ps(_mm_mul_ps(acc[k], m), a);
  __m128 s = acc[0];
  for (int k = 1; k < K; ++k) s = _mm_add_ps(s, acc[k]);
  alignas(16) float out[4];
  _mm_store_ps(out, s);
  return static_cast<double>(out[0]) + out[1] + out[2] + out[3];
}
constexpr double kFlopsPerIterF32Sse2 = 12 * 4 * 2;

using Clock = std::chrono::steady_clock;

// Runs `work(thread_index)` on `threads` threads released together; returns the wall seconds
// from the release to the last join (thread creation is outside the timed region).
template <class F>
double timed_parallel(int threads, F&& work) {
  std::latch ready(threads), go(1);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.count_down();
      go.wait();
      work(t);
    });
  ready.wait();
  const auto t0 = Clock::now();
  go.count_down();
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct AlignedArray {
  explicit AlignedArray(std::size_t n_) : n(n_) {
    const std::size_t bytes = ((n * sizeof(double) + 63) / 64) * 64;
    p = static_cast<double*>(std::aligned_alloc(64, bytes));
    if (!p) throw std::bad_alloc();
  }
  ~AlignedArray() { std::free(p); }
  AlignedArray(const AlignedArray&) = delete;
  AlignedArray& operator=(const AlignedArray&) = delete;
  double* p;
  std::size_t n;
};

// Slice [lo, hi) of n for thread t of T, rounded to whole 64-byte lines so slices stay aligned.
std::pair<std::size_t, std::size_t> slice(std::size_t n, int t, int T) {
  auto edge = [&](int k) { return std::min(n, (n / 8 * static_cast<std::size_t>(k) / static_cast<std::size_t>(T)) * 8); };
  return {edge(t), t + 1 == T ? n : edge(t + 1)};
}

}  // namespace

double read_sum(const double* a, std::size_t n) {
  const std::size_t nv = n / 16 * 16;
  v4d s0 = {0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0;
  for (std::size_t i = 0; i < nv; i += 16) {
    s0 += *reinterpret_cast<const v4d_unaligned*>(a + i);
    s1 += *reinterpret_cast<const v4d_unaligned*>(a + i + 4);
    s2 += *reinterpret_cast<const v4d_unaligned*>(a + i + 8);
    s3 += *reinterpret_cast<const v4d_unaligned*>(a + i + 12);
  }
  const v4d s = (s0 + s1) + (s2 + s3);
  double r = s[0] + s[1] + s[2] + s[3];
  for (std::size_t i = nv; i < n; ++i) r += a[i];
  return r;
}

void triad(double* __restrict a, const double* __restrict b, const double* __restrict c, double s,
           std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

double fma_f64(Isa isa, int64_t iters, double* flops) {
  switch (isa) {
    case Isa::avx512: *flops = kFlopsPerIterF64Avx512 * static_cast<double>(iters); return fma_f64_avx512(iters);
    case Isa::avx2_fma: *flops = kFlopsPerIterF64Avx2 * static_cast<double>(iters); return fma_f64_avx2(iters);
    case Isa::sse2: break;
  }
  *flops = kFlopsPerIterF64Sse2 * static_cast<double>(iters);
  return fma_f64_sse2(iters);
}

double fma_f32(Isa isa, int64_t iters, double* flops) {
  switch (isa) {
    case Isa::avx512: *flops = kFlopsPerIterF32Avx512 * static_cast<double>(iters); return fma_f32_avx512(iters);
    case Isa::avx2_fma: *flops = kFlopsPerIterF32Avx2 * static_cast<double>(iters); return fma_f32_avx2(iters);
    case Isa::sse2: break;
  }
  *flops = kFlopsPerIterF32Sse2 * static_cast<double>(iters);
  return fma_f32_sse2(iters);
}

struct Gemm::Impl {
  Eigen::MatrixXd a, b, c;
};

Gemm::Gemm(int n_) : n(n_), impl_(new Impl) {
  impl_->a = Eigen::MatrixXd::Constant(n, n, 0.5);
  impl_->b = Eigen::MatrixXd::Constant(n, n, 0.25);
  impl_->c = Eigen::MatrixXd::Zero(n, n);
}
Gemm::~Gemm() { delete impl_; }
double Gemm::run() {
  impl_->c.noalias() = impl_->a * impl_->b;
  return impl_->c(0, 0);
}

namespace {

volatile double g_sink;  // defeats dead-code elimination of probe results

// Iterations of an FMA probe that take about `target` seconds on one thread.
template <class F>
int64_t calibrate(F&& probe, double target) {
  int64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    double fl = 0;
    g_sink = probe(iters, &fl);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt >= target / 4 || iters > (int64_t{1} << 40)) return static_cast<int64_t>(static_cast<double>(iters) * target / std::max(dt, 1e-9));
    iters *= 4;
  }
}

}  // namespace

CeilingSet measure_ceilings(int threads, std::size_t stream_bytes, int reps) {
  CeilingSet cs;
  cs.threads = threads;
  cs.stream_bytes = stream_bytes;
  const std::size_t n = stream_bytes / sizeof(double);
  auto best = [&](auto&& once) {
    double v = 0;
    for (int r = 0; r < reps; ++r) v = std::max(v, once());
    return v;
  };

  std::cerr << fmt::format("[mla-bench] measuring ceilings: {} thread(s), {} MiB arrays, best of {}\n", threads,
                           stream_bytes >> 20, reps);
  {
    AlignedArray a(n), b(n), c(n);
    // First touch by the threads that will read, so pages are mapped before timing.
    timed_parallel(threads, [&](int t) {
      auto [lo, hi] = slice(n, t, threads);
      for (std::size_t i = lo; i < hi; ++i) a.p[i] = 1.0, b.p[i] = 2.0, c.p[i] = 0.5;
    });
    std::vector<double> sums(static_cast<size_t>(threads));
    cs.read_bw = best([&] {
      const double s = timed_parallel(threads, [&](int t) {
        auto [lo, hi] = slice(n, t, threads);
        sums[static_cast<size_t>(t)] = read_sum(a.p + lo, hi - lo);
      });
      g_sink = sums[0];
      return static_cast<double>(n * sizeof(double)) / s;
    });
    cs.triad_bw = best([&] {
      const double s = timed_parallel(threads, [&](int t) {
        auto [lo, hi] = slice(n, t, threads);
        triad(a.p + lo, b.p + lo, c.p + lo, 3.0, hi - lo);
      });
      g_sink = a.p[n / 2];
      return static_cast<double>(3 * n * sizeof(double)) / s;
    });
  }
  cs.all.push_back({"read_bw", "B/s", cs.read_bw,
                    fmt::format("read-only sum of one {} MiB fp64 array, {} thread(s) on disjoint slices", stream_bytes >> 20, threads)});
  cs.all.push_back({"triad_bw", "B/s", cs.triad_bw,
                    fmt::format("STREAM triad a=b+s*c over three {} MiB arrays, 24 B/element (write-allocate not counted)", stream_bytes >> 20)});

  const Isa isa = runtime_isa();
  // Best wall rate, and (via per_cpu) the best rate per CPU second of the process.
  auto fma_probe = [&](auto probe, double* per_cpu = nullptr, const char* key = nullptr) {
    const int64_t iters = calibrate(probe, 0.1);
    double best_per_cpu = 0, best_wall = 0;
    CeilingSet::ProbeLoad at_best;
    const double v = best([&] {
      std::vector<double> fl(static_cast<size_t>(threads));
      const MachineCpu m0 = machine_cpu();
      const auto w0 = Clock::now();
      const double c0 = process_cpu_seconds();
      const double s = timed_parallel(threads, [&](int t) { g_sink = probe(iters, &fl[static_cast<size_t>(t)]); });
      const double cpu = process_cpu_seconds() - c0;
      const MachineCpu m1 = machine_cpu();
      // The machine's counters span the threads' start too: judge them over that whole interval.
      const double span = std::chrono::duration<double>(Clock::now() - w0).count();
      double total = 0;
      for (double f : fl) total += f;
      if (cpu > 0) best_per_cpu = std::max(best_per_cpu, total / cpu);
      if (total / s > best_wall) {
        best_wall = total / s;
        at_best = {key ? key : "", cpu / span, machine_load(m0, m1, cpu, span)};
      }
      return total / s;
    });
    if (per_cpu) *per_cpu = best_per_cpu;
    if (key) cs.probe_loads.push_back(at_best);
    return v;
  };
  cs.fma_f64 = fma_probe([&](int64_t it, double* fl) { return fma_f64(isa, it, fl); }, &cs.fma_f64_per_cpu_second, "fma_f64");
  cs.fma_f32 = fma_probe([&](int64_t it, double* fl) { return fma_f32(isa, it, fl); }, &cs.fma_f32_per_cpu_second, "fma_f32");
  cs.all.push_back({"fma_f64", "FLOP/s", cs.fma_f64,
                    fmt::format("independent fp64 FMA chains, {} (best ISA of this CPU), {} thread(s)", to_string(isa), threads)});
  cs.all.push_back({"fma_f32", "FLOP/s", cs.fma_f32,
                    fmt::format("independent fp32 FMA chains, {} (best ISA of this CPU), {} thread(s)", to_string(isa), threads)});
  cs.all.push_back({"fma_f64_per_cpu_second", "FLOP/s", cs.fma_f64_per_cpu_second,
                    "the fp64 probe's FLOPs per CPU second the process got (one core's peak, unaffected by other "
                    "processes holding the cores)"});
  cs.all.push_back({"fma_f32_per_cpu_second", "FLOP/s", cs.fma_f32_per_cpu_second,
                    "the fp32 probe's FLOPs per CPU second the process got"});
  // The host kernels' products choose their ISA at run time (mla/ref/gemm.hpp); when they were
  // told to use a narrower one (MLA_ISA), that ISA's own peak is measured beside the machine's.
  const Isa ki = kernel_isa();
  if (ki != isa) {
    const double v = fma_probe([&](int64_t it, double* fl) { return fma_f64(ki, it, fl); });
    cs.all.push_back({"fma_f64_kernel_isa", "FLOP/s", v,
                      fmt::format("the same fp64 probe limited to {} (the ISA the host kernels run with, MLA_ISA)", to_string(ki))});
  }
  {
    constexpr int kN = 512;
    std::vector<std::unique_ptr<Gemm>> g;
    for (int t = 0; t < threads; ++t) g.push_back(std::make_unique<Gemm>(kN));
    for (auto& x : g) g_sink = x->run();  // warm-up: Eigen's packing buffers
    cs.gemm_f64 = best([&] {
      const double s = timed_parallel(threads, [&](int t) { g_sink = g[static_cast<size_t>(t)]->run(); });
      return g[0]->flops() * threads / s;
    });
    cs.all.push_back({"gemm_f64", "FLOP/s", cs.gemm_f64,
                      fmt::format("Eigen {0}x{0} fp64 GEMM per thread, compiled for {1} (what a tuned library reaches with this build)", kN,
                                  to_string(build_isa()))});
  }
  return cs;
}

std::size_t last_level_cache_bytes() {
  std::size_t best = 0;
  int best_level = 0;
  for (int idx = 0; idx < 8; ++idx) {
    const std::string base = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", idx);
    std::ifstream lv(base + "level"), sz(base + "size");
    int level = 0;
    std::string size;
    if (!(lv >> level) || !(sz >> size) || size.empty()) continue;
    std::size_t mult = 1;
    if (size.back() == 'K') mult = 1024;
    if (size.back() == 'M') mult = 1024 * 1024;
    const std::size_t v = std::strtoull(size.c_str(), nullptr, 10) * mult;
    if (level > best_level || (level == best_level && v > best)) best_level = level, best = v;
  }
  return best;
}

CacheFlusher::CacheFlusher(std::size_t bytes) : buf_(bytes / sizeof(double), 0.0) {}

void CacheFlusher::flush() {
  double k = sink_ + 1.0;
  for (double& x : buf_) x = k;
  sink_ = read_sum(buf_.data(), buf_.size()) * 1e-30;
  g_sink = sink_;
}

}  // namespace mla::bench
