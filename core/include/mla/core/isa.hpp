// Which vector instructions the host kernels use, chosen at run time.
//
// The libraries are built for the baseline x86-64 ISA (SSE2), so one binary runs on every x86-64
// machine; code that is worth a wider vector unit (the fp64 oracle's products, the host kernels,
// the generator's fills) is compiled once more per ISA and picks its version here, from what
// this CPU and its OS support.
#pragma once

#include <optional>
#include <string_view>

namespace mla {

// sse2: the baseline build; avx2: AVX2 + FMA (Haswell, Zen 1 and later); avx512: AVX-512 F, DQ,
// BW, VL with AVX2 and FMA (Skylake-SP, Ice Lake, Zen 4 and later).
enum class SimdIsa { sse2, avx2, avx512 };

const char* to_string(SimdIsa isa);  // "sse2", "avx2", "avx512"
// Throws mla::Error naming the word and the accepted ones.
SimdIsa simd_isa_from_string(std::string_view s);

// Whether this CPU (and the OS, for the registers' state) runs code compiled for `isa`.
bool cpu_supports(SimdIsa isa);
SimdIsa cpu_best_isa();  // the widest supported one

// The ISA dispatching code uses: the last set_simd_isa(isa), else MLA_ISA from the environment
// ("sse2", "avx2" or "avx512"; a word this CPU does not run is an mla::Error naming it; read at
// the first call and after set_simd_isa), else cpu_best_isa(). A lower one than the best is for
// comparing the paths on one machine.
SimdIsa simd_isa();
// nullopt returns to the environment's value (read again) or the best; an unsupported ISA is an
// mla::Error.
void set_simd_isa(std::optional<SimdIsa> isa);

}  // namespace mla
