// Internal: the two cuBLAS calls of the naive MHA baseline as data, so their arguments (the
// column-major reading of row-major buffers, leading dimensions, batch strides) are checked on
// the CPU by executing them with a reference strided-batched GEMM (suites/gpu).
//
// Buffers per sequence b with L tokens (row-major):
//   q      [b, s_q, h, 576] bf16   the query of head hh, position s at ((b·s_q + s)·h + hh)·576
//   K      [h, L, 576] bf16        per-head copy of the latent cache (built in prepare())
//   V      [h, L, 512] bf16        per-head copy of the latent part (built in prepare())
//   scores [h, s_q, L] fp32        unscaled q·k
//   probs  [h, s_q, L] bf16
//   out    [b, s_q, h, 512] bf16
#pragma once

#include <cstdint>

namespace mla::cuda::detail {

// C = op(A)·op(B) per batch entry, column-major (BLAS) convention; offsets are in elements from
// the base pointer of each buffer, strides between batch entries likewise.
struct StridedGemm {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 0;
};

// Per head: scores[s][t] = Σ_d q[s][d]·K[t][d].
inline StridedGemm naive_score_gemm(int b, int s_q, int heads, int L) {
  StridedGemm g;
  // Column-major, S row-major [s_q][L] is Sᵀ [L × s_q] with ld L. Sᵀ = K·Qᵀ where K row-major
  // [L][576] is the column-major [576 × L] matrix transposed (op T), and Q row-major [s_q][576]
  // with row stride h·576 is the column-major [576 × s_q] matrix Qᵀ (op N).
  g.trans_a = true;
  g.trans_b = false;
  g.m = L;
  g.n = s_q;
  g.k = 576;
  g.lda = 576;
  g.stride_a = int64_t{L} * 576;
  g.ldb = heads * 576;
  g.b_offset = int64_t{b} * s_q * heads * 576;
  g.stride_b = 576;  // next head
  g.ldc = L;
  g.stride_c = int64_t{s_q} * L;
  g.batch = heads;
  return g;
}

// Per head: out[b, s, hh, c] = Σ_t probs[s][t]·V[t][c].
inline StridedGemm naive_value_gemm(int b, int s_q, int heads, int L) {
  StridedGemm g;
  // Oᵀ [512 × s_q] (column-major, ld h·512: row s of head hh at (s·h + hh)·512) = Vᵀ·Pᵀ where
  // V row-major [L][512] is column-major [512 × L] (op N) and P row-major [s_q][L] is
  // column-major [L × s_q] (op N).
  g.trans_a = false;
  g.trans_b = false;
  g.m = 512;
  g.n = s_q;
  g.k = L;
  g.lda = 512;
  g.stride_a = int64_t{L} * 512;
  g.ldb = L;
  g.stride_b = int64_t{s_q} * L;
  g.ldc = heads * 512;
  g.c_offset = int64_t{b} * s_q * heads * 512;
  g.stride_c = 512;  // next head
  g.batch = heads;
  return g;
}

}  // namespace mla::cuda::detail
