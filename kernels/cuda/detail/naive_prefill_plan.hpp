// Internal: the work of the naive MHA-form prefill baseline (cuda_naive_prefill_cublas) as data:
// which query rows go together, the two cuBLAS calls of each such chunk, and the bytes they and
// the softmax move. Plain C++ (no CUDA), so suites/gpu executes the very same plan on the CPU with
// a reference strided-batched GEMM, and the byte model is the plan's sum, not a second formula.
//
// Buffers (row-major, the prefill contract's canonical layouts, mla/core/prefill.hpp):
//   q      [total_q, h, 192] bf16   row t of head hh at (t·h + hh)·192
//   k      [total_k, h, 192] bf16
//   v      [total_k, h, 128] bf16
//   scores [h, rows, s_k] fp32      one chunk's unscaled q·k (workspace, reused chunk after chunk)
//   probs  [h, rows, s_k] bf16
//   out    [total_q, h, 128] bf16
//   lse    [h, total_q] fp32
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "detail/naive_gemm_plan.hpp"

namespace mla::cuda::detail {

inline constexpr int kPrefillDqk = 192;
inline constexpr int kPrefillDv = 128;

// The workspace one chunk may use for S and P (6 bytes per head, row and key): a fixed budget, so
// the chunks (and with them cuBLAS's choice of algorithm, and the bits) depend on the shape only.
inline constexpr int64_t kPrefillWorkspaceBudget = int64_t{1} << 30;

// One sequence of the ragged batch, as cu_seqlens_q / cu_seqlens_k cut it.
struct PrefillSeq {
  int64_t q_begin = 0, s_q = 0, k_begin = 0, s_k = 0;
};

// `rows` query rows of one sequence from row `row0` (0-based within the sequence).
struct PrefillChunk {
  int seq = 0;
  int64_t row0 = 0;
  int rows = 0;
};

// Query rows per chunk of a sequence with s_k keys: as many as fit the budget, at least one,
// at most s_q.
inline int prefill_chunk_rows(int heads, int64_t s_q, int64_t s_k, int64_t budget = kPrefillWorkspaceBudget) {
  const int64_t per_row = int64_t{heads} * std::max<int64_t>(s_k, 1) * (4 + 2);
  return static_cast<int>(std::clamp<int64_t>(budget / per_row, 1, std::max<int64_t>(s_q, 1)));
}

// Every chunk of every sequence that has query rows and keys, in order. A sequence with query
// rows and no key is not here: its rows are written as empty (out 0, lse +inf) without a GEMM.
inline std::vector<PrefillChunk> prefill_chunks(const std::vector<PrefillSeq>& seqs, int heads,
                                                int64_t budget = kPrefillWorkspaceBudget) {
  std::vector<PrefillChunk> v;
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    const PrefillSeq& s = seqs[b];
    if (s.s_q == 0 || s.s_k == 0) continue;
    const int n = prefill_chunk_rows(heads, s.s_q, s.s_k, budget);
    for (int64_t r = 0; r < s.s_q; r += n)
      v.push_back({static_cast<int>(b), r, static_cast<int>(std::min<int64_t>(n, s.s_q - r))});
  }
  return v;
}

// The most rows x keys any chunk holds: the workspace's size in (head, row, key) triples / h.
inline int64_t prefill_workspace_pairs(const std::vector<PrefillSeq>& seqs, const std::vector<PrefillChunk>& chunks) {
  int64_t most = 0;
  for (const PrefillChunk& c : chunks) most = std::max(most, int64_t{c.rows} * seqs[static_cast<std::size_t>(c.seq)].s_k);
  return most;
}

// Per head: scores[i][j] = Σ_d q[row0 + i][d]·k[j][d] over the chunk's rows and the sequence's keys.
inline StridedGemm prefill_score_gemm(const PrefillSeq& s, const PrefillChunk& c, int heads) {
  StridedGemm g;
  // S row-major [rows][s_k] is Sᵀ column-major [s_k × rows] with ld s_k. Sᵀ = K·Qᵀ: K row-major
  // [s_k][192] with row stride h·192 is the column-major [192 × s_k] matrix Kᵀ, read with op T;
  // Q row-major [rows][192] with row stride h·192 is the column-major [192 × rows] matrix Qᵀ (op N).
  g.trans_a = true;
  g.trans_b = false;
  g.m = static_cast<int>(s.s_k);
  g.n = c.rows;
  g.k = kPrefillDqk;
  g.lda = heads * kPrefillDqk;
  g.a_offset = s.k_begin * heads * kPrefillDqk;
  g.stride_a = kPrefillDqk;  // next head
  g.ldb = heads * kPrefillDqk;
  g.b_offset = (s.q_begin + c.row0) * heads * kPrefillDqk;
  g.stride_b = kPrefillDqk;
  g.ldc = static_cast<int>(s.s_k);
  g.stride_c = int64_t{c.rows} * s.s_k;
  g.batch = heads;
  return g;
}

// Per head: out[row0 + i][c] = Σ_j probs[i][j]·v[j][c].
inline StridedGemm prefill_value_gemm(const PrefillSeq& s, const PrefillChunk& c, int heads) {
  StridedGemm g;
  // Oᵀ [128 × rows] column-major with ld h·128 (row t of head hh at (t·h + hh)·128) = Vᵀ·Pᵀ: V
  // row-major [s_k][128] with row stride h·128 is the column-major [128 × s_k] matrix Vᵀ (op N);
  // P row-major [rows][s_k] is the column-major [s_k × rows] matrix Pᵀ (op N).
  g.trans_a = false;
  g.trans_b = false;
  g.m = kPrefillDv;
  g.n = c.rows;
  g.k = static_cast<int>(s.s_k);
  g.lda = heads * kPrefillDv;
  g.a_offset = s.k_begin * heads * kPrefillDv;
  g.stride_a = kPrefillDv;
  g.ldb = static_cast<int>(s.s_k);
  g.stride_b = int64_t{c.rows} * s.s_k;
  g.ldc = heads * kPrefillDv;
  g.c_offset = (s.q_begin + c.row0) * heads * kPrefillDv;
  g.stride_c = kPrefillDv;
  g.batch = heads;
  return g;
}

// The keys query row r (0-based within its sequence) attends: [0, limit). Bottom-right causal:
// limit = s_k - s_q + r + 1 clamped to [0, s_k]; the context-chunk call: every key.
inline int64_t prefill_row_limit(bool causal, int64_t s_q, int64_t s_k, int64_t r) {
  return causal ? std::clamp<int64_t>(s_k - s_q + r + 1, 0, s_k) : s_k;
}

// What the timed call moves, chunk by chunk (the GEMMs read whole operands and write whole S and
// P, masked or not; the softmax reads S only where the row attends): Q rows, K and V of the
// sequence (again for every chunk), S written and read, P written and read, out and lse; an
// empty sequence's rows have out and lse written only.
inline double prefill_naive_bytes(const std::vector<PrefillSeq>& seqs, int heads, bool causal,
                                  int64_t budget = kPrefillWorkspaceBudget) {
  const double h = heads;
  double bytes = 0;
  for (const PrefillChunk& c : prefill_chunks(seqs, heads, budget)) {
    const PrefillSeq& s = seqs[static_cast<std::size_t>(c.seq)];
    const double rows = c.rows, keys = static_cast<double>(s.s_k);
    double attended = 0;
    for (int64_t i = 0; i < c.rows; ++i) attended += static_cast<double>(prefill_row_limit(causal, s.s_q, s.s_k, c.row0 + i));
    bytes += rows * h * kPrefillDqk * 2 + keys * h * kPrefillDqk * 2  // Q·Kᵀ reads
             + rows * keys * h * 4 + attended * h * 4                   // S written, read by the softmax
             + rows * keys * h * 2 * 2                                  // P written, read by P·V
             + keys * h * kPrefillDv * 2                                // V
             + rows * h * (kPrefillDv * 2 + 4);                         // out and lse
  }
  for (const PrefillSeq& s : seqs)
    if (s.s_k == 0) bytes += static_cast<double>(s.s_q) * h * (kPrefillDv * 2 + 4);
  return bytes;
}

}  // namespace mla::cuda::detail
