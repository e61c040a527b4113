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

// The ISA the products above run with now (mla::simd_isa()).
inline SimdIsa gemm_isa() { return simd_isa(); }

}  // namespace mla::ref
