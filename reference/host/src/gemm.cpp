#include "mla/ref/gemm.hpp"

// The per-ISA builds (gemm_isa.hpp); declared here, where they are chosen.
#define MLA_GEMM_DECLARE(ISA)                                                                                      \
  namespace mla::ref::gemm_detail::ISA {                                                                           \
  void gemm_abt(int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t, double*, int64_t, bool); \
  void gemm_abt(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t, bool);    \
  void gemm_ab(int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t, double*, int64_t, bool);  \
  void gemm_ab(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t, bool);     \
  void decode_bf16_token(const uint8_t*, double*);                                                                 \
  void decode_fp8_token(const uint8_t*, double*);                                                                  \
  void exp_minus(double*, int64_t, double);                                                                        \
  }
MLA_GEMM_DECLARE(sse2)
MLA_GEMM_DECLARE(avx2)
MLA_GEMM_DECLARE(avx512)
#undef MLA_GEMM_DECLARE

namespace mla::ref {

#define MLA_GEMM_DISPATCH(FN, ...)                                 \
  switch (simd_isa()) {                                            \
    case SimdIsa::avx512: return gemm_detail::avx512::FN(__VA_ARGS__); \
    case SimdIsa::avx2: return gemm_detail::avx2::FN(__VA_ARGS__);     \
    case SimdIsa::sse2: break;                                     \
  }                                                                \
  return gemm_detail::sse2::FN(__VA_ARGS__)

void gemm_abt(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
              int64_t ldc, bool acc) {
  MLA_GEMM_DISPATCH(gemm_abt, m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_abt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc, bool acc) {
  MLA_GEMM_DISPATCH(gemm_abt, m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_ab(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
             int64_t ldc, bool acc) {
  MLA_GEMM_DISPATCH(gemm_ab, m, n, k, a, lda, b, ldb, c, ldc, acc);
}
void gemm_ab(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc, bool acc) {
  MLA_GEMM_DISPATCH(gemm_ab, m, n, k, a, lda, b, ldb, c, ldc, acc);
}

void decode_bf16_token(const uint8_t* token, double* out) { MLA_GEMM_DISPATCH(decode_bf16_token, token, out); }
void decode_fp8_token(const uint8_t* token, double* out) { MLA_GEMM_DISPATCH(decode_fp8_token, token, out); }
void exp_minus(double* x, int64_t n, double m) { MLA_GEMM_DISPATCH(exp_minus, x, n, m); }

#undef MLA_GEMM_DISPATCH

}  // namespace mla::ref
