#include "mla/core/isa.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

namespace {

// -1: not set; else the SimdIsa value. g_isa: set_simd_isa's; g_env_isa: MLA_ISA's (or the best).
std::atomic<int> g_isa{-1};
std::atomic<int> g_env_isa{-1};

SimdIsa env_or_best_isa();

bool detect(SimdIsa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (isa) {
    case SimdIsa::sse2: return true;
    case SimdIsa::avx2: return avx2;
    case SimdIsa::avx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == SimdIsa::sse2;
#endif
}

SimdIsa checked(SimdIsa isa, const char* who) {
  if (!cpu_supports(isa)) throw Error(fmt::format("{}: this CPU does not run {} code", who, to_string(isa)));
  return isa;
}

}  // namespace

const char* to_string(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::sse2: return "sse2";
    case SimdIsa::avx2: return "avx2";
    case SimdIsa::avx512: return "avx512";
  }
  return "?";
}

SimdIsa simd_isa_from_string(std::string_view s) {
  if (s == "sse2") return SimdIsa::sse2;
  if (s == "avx2") return SimdIsa::avx2;
  if (s == "avx512") return SimdIsa::avx512;
  throw Error(fmt::format("unknown ISA '{}' (known: sse2, avx2, avx512)", s));
}

bool cpu_supports(SimdIsa isa) {
  static const bool avx2 = detect(SimdIsa::avx2), avx512 = detect(SimdIsa::avx512);
  switch (isa) {
    case SimdIsa::sse2: return true;
    case SimdIsa::avx2: return avx2;
    case SimdIsa::avx512: return avx512;
  }
  return false;
}

SimdIsa cpu_best_isa() {
  if (cpu_supports(SimdIsa::avx512)) return SimdIsa::avx512;
  if (cpu_supports(SimdIsa::avx2)) return SimdIsa::avx2;
  return SimdIsa::sse2;
}

SimdIsa simd_isa() {
  const int set = g_isa.load(std::memory_order_relaxed);
  if (set >= 0) return static_cast<SimdIsa>(set);
  // Read MLA_ISA once and remember it (every product and token decode asks; getenv showed in
  // profiles); set_simd_isa(nullopt) forgets it. A malformed value is not remembered, so every
  // call reports it.
  const int env = g_env_isa.load(std::memory_order_relaxed);
  if (env >= 0) return static_cast<SimdIsa>(env);
  const SimdIsa isa = env_or_best_isa();
  g_env_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}

namespace {

SimdIsa env_or_best_isa() {
  if (const char* e = std::getenv("MLA_ISA"); e != nullptr && *e != '\0') {
    SimdIsa isa;
    try {
      isa = simd_isa_from_string(e);
    } catch (const Error&) {
      throw Error(fmt::format("MLA_ISA='{}': expected sse2, avx2 or avx512", e));
    }
    return checked(isa, fmt::format("MLA_ISA={}", e).c_str());
  }
  return cpu_best_isa();
}

}  // namespace

void set_simd_isa(std::optional<SimdIsa> isa) {
  if (isa) checked(*isa, "set_simd_isa");
  g_isa.store(isa ? static_cast<int>(*isa) : -1, std::memory_order_relaxed);
  g_env_isa.store(-1, std::memory_order_relaxed);
}

}  // namespace mla
