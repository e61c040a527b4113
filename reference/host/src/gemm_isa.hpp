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

// bf16 is the top half of a float32.
void decode_bf16_token(const uint8_t* token, double* out) {
  for (int d = 0; d < 576; ++d) {
    const uint32_t b = static_cast<uint32_t>(token[2 * d]) | static_cast<uint32_t>(token[2 * d + 1]) << 8;
    out[d] = static_cast<double>(__builtin_bit_cast(float, b << 16));
  }
}

// e4m3 without a table, so it vectorizes: the code's 7 magnitude bits placed at the top of a
// float64's exponent and mantissa fields (bits 49..55) read as (1 + m/8)·2^(e-1023) for e >= 1
// and as the float64 subnormal m·2^-1025 for e = 0; times 2^1016 (exact) that is e4m3's
// (1 + m/8)·2^(e-7) and m·2^-9. The sign goes to bit 63; 0x7F/0xFF are NaN.
void decode_fp8_token(const uint8_t* token, double* out) {
  for (int blk = 0; blk < 4; ++blk) {
    float scale_f;
    __builtin_memcpy(&scale_f, token + 512 + 4 * blk, sizeof(float));
    const double scale = static_cast<double>(scale_f);
    const uint8_t* codes = token + 128 * blk;
    double* dst = out + 128 * blk;
    for (int j = 0; j < 128; ++j) {
      const uint64_t c = codes[j];
      const uint64_t bits = ((c & 0x80) << 56) | ((c & 0x7F) << 49);
      const double v = __builtin_bit_cast(double, bits) * 0x1p1016;
      dst[j] = (c & 0x7F) == 0x7F ? __builtin_nan("") : v * scale;
    }
  }
  const uint8_t* rope = token + 512 + 16;
  for (int d = 0; d < 64; ++d) {
    const uint32_t b = static_cast<uint32_t>(rope[2 * d]) | static_cast<uint32_t>(rope[2 * d + 1]) << 8;
    out[512 + d] = static_cast<double>(__builtin_bit_cast(float, b << 16));
  }
}

}  // namespace mla::ref::gemm_detail::MLA_GEMM_ISA

#undef Eigen
