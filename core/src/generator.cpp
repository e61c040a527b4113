#include "mla/core/generator.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "generator_kernels.hpp"
#include "mla/core/error.hpp"

// splitmix64-uniform-v1, exactly as fixtures/SCHEMA.md writes it: every operation is on
// uint64 (wrapping, as the schema's "modulo 2^64") or float64 in the written order, so the
// Python reference and this file produce identical bits. The fills run the same formula per
// element (generator_kernels.hpp: the rules the vector kernels keep to stay bit-identical).

namespace mla::gen {

using detail::kGamma;

uint64_t mix64(uint64_t z) { return detail::mix(z); }

uint64_t key(uint64_t seed, uint64_t stream) { return mix64(seed * kGamma + stream + 1); }

uint64_t bits(uint64_t seed, uint64_t stream, uint64_t i) {
  return mix64(key(seed, stream) + (i + 1) * kGamma);
}

double uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  return static_cast<double>(bits(seed, stream, i) >> 11) * 0x1p-53;
}

double value(uint64_t seed, uint64_t stream, uint64_t i, double mean, double std) {
  const double u = uniform01(seed, stream, i);
  return ((2.0 * u - 1.0) * detail::kSqrt3) * std + mean;
}

namespace detail {

void fill_f64_scalar(uint64_t k, uint64_t first, double mean, double sd, double* out, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) out[j] = value_at(k, first + j, mean, sd);
}

void fill_bf16_scalar(uint64_t k, uint64_t first, double mean, double sd, uint16_t* out, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) out[j] = bf16_of(value_at(k, first + j, mean, sd));
}

}  // namespace detail

// ---- ISA and threads ----------------------------------------------------------------------------

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::automatic: return "automatic";
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

bool supported(Isa isa) {
  static const bool avx2 = detail::cpu_has_avx2();
  static const bool avx512 = detail::cpu_has_avx512();
  switch (isa) {
    case Isa::automatic:
    case Isa::scalar: return true;
    case Isa::avx2: return avx2;
    case Isa::avx512: return avx512;
  }
  return false;
}

Isa best_isa() {
  if (supported(Isa::avx512)) return Isa::avx512;
  if (supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

namespace {

std::atomic<int> g_threads{0};  // set_threads' value; 0: not set

int env_or_hardware_threads() {
  if (const char* e = std::getenv("MLA_THREADS"); e != nullptr && *e != '\0') {
    errno = 0;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (errno != 0 || end == e || *end != '\0' || v < 1 || v > 4096)
      throw Error(fmt::format("MLA_THREADS='{}': expected a thread count between 1 and 4096", e));
    return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// A thread gets at least this many elements: below it, starting a thread (tens of us) costs more
// than the fill it would share (about 1 ns per element).
constexpr std::size_t kMinPerThread = std::size_t{1} << 16;

template <class T>
using Kernel = void (*)(uint64_t k, uint64_t first, double mean, double sd, T* out, std::size_t n);

Isa resolve(Isa isa) {
  if (isa == Isa::automatic) return best_isa();
  if (!supported(isa)) throw Error(fmt::format("gen::fill: this CPU does not run the {} kernel", to_string(isa)));
  return isa;
}

// The range cut into pieces for the threads, each filled by the ISA's kernel from its own counter.
template <class T>
void fill_parallel(uint64_t seed, uint64_t stream, double mean, double sd, std::span<T> out, const FillOptions& opt,
                   Kernel<T> scalar, Kernel<T> avx2, Kernel<T> avx512) {
  if (opt.threads < 0) throw Error(fmt::format("gen::fill: negative thread count {}", opt.threads));
  const Isa isa = resolve(opt.isa);
  const Kernel<T> kernel = isa == Isa::avx512 ? avx512 : isa == Isa::avx2 ? avx2 : scalar;
  const uint64_t k = key(seed, stream);
  parallel_for(out.size(), kMinPerThread,
               [&](std::size_t b, std::size_t e) { kernel(k, opt.first + b, mean, sd, out.data() + b, e - b); },
               opt.threads);
}

}  // namespace

int threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : env_or_hardware_threads();
}

void set_threads(int n) {
  if (n < 0 || n > 4096) throw Error(fmt::format("gen::set_threads({}): expected 0 (default) or 1..4096", n));
  g_threads.store(n, std::memory_order_relaxed);
}

void parallel_for(std::size_t n, std::size_t min_per_thread, const std::function<void(std::size_t, std::size_t)>& body,
                  int nthreads) {
  if (n == 0) return;
  const std::size_t want = static_cast<std::size_t>(nthreads > 0 ? nthreads : threads());
  const std::size_t pieces = std::clamp<std::size_t>(n / std::max<std::size_t>(min_per_thread, 1), 1, want);
  if (pieces == 1) {
    body(0, n);
    return;
  }
  // Piece boundaries on multiples of 64 items: whole cache lines per thread for every element
  // type the fills write, so no two threads share a line.
  auto bound = [&](std::size_t p) { return p == pieces ? n : std::min(n, (n / pieces * p) & ~std::size_t{63}); };
  std::exception_ptr error;
  std::mutex m;
  auto run = [&](std::size_t p) {
    try {
      if (bound(p) < bound(p + 1)) body(bound(p), bound(p + 1));
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(pieces - 1);
  for (std::size_t p = 1; p < pieces; ++p) pool.emplace_back(run, p);
  run(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// ---- fills --------------------------------------------------------------------------------------

void fill_f64(uint64_t seed, uint64_t stream, double mean, double std, std::span<double> out, const FillOptions& opt) {
  fill_parallel<double>(seed, stream, mean, std, out, opt, detail::fill_f64_scalar, detail::fill_f64_avx2,
                        detail::fill_f64_avx512);
}

void fill_bf16(uint64_t seed, uint64_t stream, double mean, double std, std::span<uint16_t> out,
               const FillOptions& opt) {
  fill_parallel<uint16_t>(seed, stream, mean, std, out, opt, detail::fill_bf16_scalar, detail::fill_bf16_avx2,
                          detail::fill_bf16_avx512);
}

std::vector<int64_t> permutation(uint64_t seed, uint64_t stream, int64_t n) {
  if (n < 0) throw Error(fmt::format("gen::permutation: negative length {}", n));
  const uint64_t k = key(seed, stream);
  std::vector<uint64_t> b(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) b[i] = mix64(k + (static_cast<uint64_t>(i) + 1) * kGamma);
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Stable, so equal draws (astronomically rare) still give one defined order in every language.
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return b[x] < b[y]; });
  return order;
}

}  // namespace mla::gen
