#include "mla/core/generator.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "generator_kernels.hpp"
#include "mla/core/error.hpp"
#include "mla/core/isa.hpp"

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

// The host code's one CPU detection (mla/core/isa.hpp). Its avx2 also asks for FMA, which the
// generator's AVX2 kernel does not use; no x86-64 CPU has AVX2 without FMA.
bool supported(Isa isa) {
  switch (isa) {
    case Isa::automatic:
    case Isa::scalar: return true;
    case Isa::avx2: return cpu_supports(SimdIsa::avx2);
    case Isa::avx512: return cpu_supports(SimdIsa::avx512);
  }
  return false;
}

Isa best_isa() {
  if (supported(Isa::avx512)) return Isa::avx512;
  if (supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

namespace {

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
