// One ISA's build of the products of mla/ref/gemm.hpp, included by gemm_sse2.cpp, gemm_avx2.cpp
// and gemm_avx512.cpp with MLA_GEMM_ISA set to the ISA's name; each of those files is compiled
// with that ISA's flags (reference/CMakeLists.txt).
//
// Eigen is header-only templates: the same Eigen function compiled with -mavx512f in one file and
// for SSE2 in another would be one symbol to the linker, which keeps either copy, and an SSE2-only
// CPU could end up running AVX-512 code. Renaming Eigen's namespace per ISA makes every Eigen
// instantiation here a distinct symbol. The code of this file calls nothing of the standard
// library's templates for the same reason.
#pragma once

#ifndef MLA_GEMM_ISA
#error "define MLA_GEMM_ISA (sse2, avx2 or avx512) before including gemm_isa.hpp"
#endif

#include <cstdint>

#define MLA_GEMM_CAT2(a, b) a##b
#define MLA_GEMM_CAT(a, b) MLA_GEMM_CAT2(a, b)
#define Eigen MLA_GEMM_CAT(Eigen_mla_, MLA_GEMM_ISA)
#include <Eigen/Core>

namespace mla::ref::gemm_detail::MLA_GEMM_ISA {

namespace {

template <class T>
using MatRM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using CMap = Eigen::Map<const MatRM<T>, 0, Eigen::OuterStride<>>;
template <class T>
using MMap = Eigen::Map<MatRM<T>, 0, Eigen::OuterStride<>>;

template <class T>
void abt(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc,
         bool acc) {
  const CMap<T> A(a, m, k, Eigen::OuterStride<>(lda));
  const CMap<T> B(b, n, k, Eigen::OuterStride<>(ldb));
  MMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  if (acc) {
    C.noalias() += A * B.transpose();
  } else {
    C.noalias() = A * B.transpose();
  }
}

template <class T>
void ab(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc,
        bool acc) {
  const CMap<T> A(a, m, k, Eigen::OuterStride<>(lda));
  const CMap<T> B(b, k, n, Eigen::OuterStride<>(ldb));
  MMap<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  if (acc) {
    C.noalias() += A * B;
  } else {
    C.noalias() = A * B;
  }
}

}  // namespace

void gemm_abt(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
              int64_t ldc, bool acc) {
  abt(m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_abt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc, bool acc) {
  abt(m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_ab(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
             int64_t ldc, bool acc) {
  ab(m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_ab(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc, bool acc) {
  ab(m, n, k, a, lda, b, ldb, c, ldc, acc);
}

}  // namespace mla::ref::gemm_detail::MLA_GEMM_ISA

#undef Eigen
