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

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
// glibc's vector exp (libmvec, the x86-64 vector function ABI: 8 or 4 lanes in one register;
// suites/reference/test_threads_isa.cpp holds it within 4 ulp of the scalar exp). Declared here
// rather than through <math.h>, which announces them only under -ffast-math, a mode that would
// also drop the NaN and infinity semantics the oracle relies on.
extern "C" __m512d _ZGVeN8v_exp(__m512d);
extern "C" __m256d _ZGVdN4v_exp(__m256d);
#endif

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

// Few rows (a decode step of 16 or 32 heads): Eigen packs the tall operand, the decoded cache
// chunk, for each product, which at 16 rows costs as much as the products themselves. These
// read it in place: register tiles of up to 4 x 4 (rows x tokens, or rows x vectors of
// columns) in this ISA's vector width, summed in a fixed order for a given shape.
#if defined(__AVX512F__)
constexpr int kW = 8;
#elif defined(__AVX2__)
constexpr int kW = 4;
#else
constexpr int kW = 2;
#endif
typedef double vd __attribute__((vector_size(kW * 8)));
typedef double vdu __attribute__((vector_size(kW * 8), aligned(8)));  // unaligned access
constexpr int64_t kSmallRows = 32;

inline vd load(const double* p) { return *reinterpret_cast<const vdu*>(p); }
inline void store(double* p, vd v) { *reinterpret_cast<vdu*>(p) = v; }
inline double hsum(vd v) {
  double s = 0;
  for (int i = 0; i < kW; ++i) s += v[i];
  return s;
}

// C[RB x JB] tile of A·Bᵀ over k (k % kW == 0).
template <int RB, int JB>
void abt_tile(int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc,
              bool acc) {
  vd s[RB][JB];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < JB; ++j) s[r][j] = vd{} ;
  for (int64_t d = 0; d < k; d += kW) {
    vd bv[JB];
    for (int j = 0; j < JB; ++j) bv[j] = load(b + j * ldb + d);
    for (int r = 0; r < RB; ++r) {
      const vd av = load(a + r * lda + d);
      for (int j = 0; j < JB; ++j) s[r][j] += av * bv[j];
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < JB; ++j) c[r * ldc + j] = (acc ? c[r * ldc + j] : 0.0) + hsum(s[r][j]);
}

template <int RB>
void abt_rows(int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc,
              bool acc) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) abt_tile<RB, 4>(k, a, lda, b + j * ldb, ldb, c + j, ldc, acc);
  for (; j < n; ++j) abt_tile<RB, 1>(k, a, lda, b + j * ldb, ldb, c + j, ldc, acc);
}

void abt_small(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
               int64_t ldc, bool acc) {
  // Tokens outer (a block of 64 stays in L1/L2 while every row block passes over it).
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t jn = n - j0 < 64 ? n - j0 : 64;
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) abt_rows<4>(jn, k, a + r * lda, lda, b + j0 * ldb, ldb, c + r * ldc + j0, ldc, acc);
    for (; r < m; ++r) abt_rows<1>(jn, k, a + r * lda, lda, b + j0 * ldb, ldb, c + r * ldc + j0, ldc, acc);
  }
}

// C[RB x 4 vectors] tile of A·B over k.
template <int RB>
void ab_tile(int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc, bool acc) {
  vd s[RB][4];
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < 4; ++v) s[r][v] = acc ? load(c + r * ldc + v * kW) : vd{};
  for (int64_t j = 0; j < k; ++j) {
    vd bv[4];
    for (int v = 0; v < 4; ++v) bv[v] = load(b + j * ldb + v * kW);
    for (int r = 0; r < RB; ++r) {
      const double x = a[r * lda + j];
      for (int v = 0; v < 4; ++v) s[r][v] += x * bv[v];
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int v = 0; v < 4; ++v) store(c + r * ldc + v * kW, s[r][v]);
}

void ab_small(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
              int64_t ldc, bool acc) {
  for (int64_t c0 = 0; c0 < n; c0 += 4 * kW) {
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) ab_tile<4>(k, a + r * lda, lda, b + c0, ldb, c + r * ldc + c0, ldc, acc);
    for (; r < m; ++r) ab_tile<1>(k, a + r * lda, lda, b + c0, ldb, c + r * ldc + c0, ldc, acc);
  }
}

}  // namespace

void gemm_abt(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
              int64_t ldc, bool acc) {
  if (m <= kSmallRows && k % kW == 0) return abt_small(m, n, k, a, lda, b, ldb, c, ldc, acc);
  abt(m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_abt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc, bool acc) {
  abt(m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_ab(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
             int64_t ldc, bool acc) {
  if (m <= kSmallRows && n % (4 * kW) == 0) return ab_small(m, n, k, a, lda, b, ldb, c, ldc, acc);
  ab(m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_ab(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc, bool acc) {
  ab(m, n, k, a, lda, b, ldb, c, ldc, acc);
}

// bf16 is the top half of a float32.
void decode_bf16_token(const uint8_t* token, double* out) {
  uint16_t h[576];
  __builtin_memcpy(h, token, sizeof h);  // little endian, like every host we build for
  for (int d = 0; d < 576; ++d) out[d] = static_cast<double>(__builtin_bit_cast(float, static_cast<uint32_t>(h[d]) << 16));
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
  uint16_t rope[64];
  __builtin_memcpy(rope, token + 512 + 16, sizeof rope);
  for (int d = 0; d < 64; ++d) out[512 + d] = static_cast<double>(__builtin_bit_cast(float, static_cast<uint32_t>(rope[d]) << 16));
}

// x[i] = exp(x[i] - m) for i < n: the softmax's numerators. A masked score of -inf gives 0, a
// NaN stays NaN. Vector paths: libmvec's exp on whole registers, the tail padded with -inf, so
// every element goes through the same function whatever its place in the row.
void exp_minus(double* x, int64_t n, double m) {
#if defined(__AVX512F__)
  constexpr int64_t kL = 8;
  const __m512d vm = _mm512_set1_pd(m);
  int64_t i = 0;
  for (; i + kL <= n; i += kL) _mm512_storeu_pd(x + i, _ZGVeN8v_exp(_mm512_sub_pd(_mm512_loadu_pd(x + i), vm)));
#elif defined(__AVX2__)
  constexpr int64_t kL = 4;
  const __m256d vm = _mm256_set1_pd(m);
  int64_t i = 0;
  for (; i + kL <= n; i += kL) _mm256_storeu_pd(x + i, _ZGVdN4v_exp(_mm256_sub_pd(_mm256_loadu_pd(x + i), vm)));
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
  if (i < n) {
    alignas(64) double t[kL];
    for (int64_t j = 0; j < kL; ++j) t[j] = i + j < n ? x[i + j] : -__builtin_inf();
#if defined(__AVX512F__)
    _mm512_store_pd(t, _ZGVeN8v_exp(_mm512_sub_pd(_mm512_load_pd(t), vm)));
#else
    _mm256_store_pd(t, _ZGVdN4v_exp(_mm256_sub_pd(_mm256_load_pd(t), vm)));
#endif
    for (int64_t j = 0; i + j < n; ++j) x[i + j] = t[j];
  }
#else
  for (int64_t i = 0; i < n; ++i) x[i] = __builtin_exp(x[i] - m);
#endif
}

}  // namespace mla::ref::gemm_detail::MLA_GEMM_ISA

#undef Eigen
