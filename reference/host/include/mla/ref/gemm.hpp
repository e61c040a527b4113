// The matrix products of the host oracles and kernels, compiled once per ISA and chosen at run
// time (mla/core/isa.hpp: the widest this CPU runs, or MLA_ISA / set_simd_isa for comparing
// paths). The libraries are built for baseline x86-64 so one binary runs everywhere; these
// products are where the fp64 oracle and the naive MHA spend their time, and an SSE2 build of
// them reaches less than half of what AVX2+FMA or AVX-512 does on the same core.
//
// Row-major operands with leading dimensions (elements between consecutive rows). Every call is
// single-threaded and, for a given ISA and shape, always sums in the same order: callers split
// work into pieces fixed by the problem (mla/core/threads.hpp), so results do not depend on the
// thread count. Different ISAs sum in different orders (FMA or not, 2/4/8 lanes): their results
// differ in the last bits, which the fp64 bounds absorb (suites/reference tests each path).
#pragma once

#include <cstdint>

#include "mla/core/isa.hpp"

namespace mla::ref {

// C[m x n] = (or += when `accumulate`) A[m x k] · B[n x k]ᵀ.
void gemm_abt(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
              int64_t ldc, bool accumulate);
void gemm_abt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc, bool accumulate);
// C[m x n] = (or +=) A[m x k] · B[k x n].
void gemm_ab(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
             int64_t ldc, bool accumulate);
void gemm_ab(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc, bool accumulate);

// The cache-token decoders, built and chosen the same way: at 16 heads the oracle spends as
// long decoding tokens as multiplying them. Exact: bf16 widens exactly, and an e4m3 value
// (4 significant bits) times its float32 block scale is exact in float64, so every ISA gives
// the bits of mla::fp8_dequantize_token (NaN codes give a NaN).
// 576 bf16 values (1152 little-endian bytes) -> 576 doubles.
void decode_bf16_token(const uint8_t* token, double* out);
// One 656-byte FP8 token (mla/core/numeric.hpp layout) -> 576 doubles.
void decode_fp8_token(const uint8_t* token, double* out);

// x[i] = exp(x[i] - m) for i < n (the softmax's numerators; -inf gives 0, NaN stays NaN): glibc's
// vector exp on the AVX2 and AVX-512 paths, the scalar one on SSE2. Not bitwise the scalar exp
// (within 4 ulp of it, tested), so, like the products, each ISA is its own path.
void exp_minus(double* x, int64_t n, double m);

// The ISA the products above run with now (mla::simd_isa()).
inline SimdIsa gemm_isa() { return simd_isa(); }

}  // namespace mla::ref
