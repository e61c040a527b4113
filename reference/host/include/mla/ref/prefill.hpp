// MHA-form prefill attention and the merge of two partial attention states, in float64: the
// oracles of the prefill and merge golden families (fixtures/SCHEMA.md, "Prefill cases", "Merge
// cases"; the Python reference's mla_ref.prefill and mla_ref.merge define the semantics).
//
// Prefill is the compute-bound half of MLA: every query row of a sequence meets every key, so the
// oracle is blocked matrix products (per sequence and head, a block of query rows against chunks
// of keys: S = Q·Kᵀ, then O += P·V, with an online softmax between) through mla/ref/gemm.hpp's
// per-ISA products, on mla::threads() threads. The blocks and chunks are fixed by the shape, so
// the bits do not depend on the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mla::ref {

// Which keys a query row of a sequence with s_q queries and s_k keys attends.
enum class PrefillMask {
  none,                  // every key (a context chunk attending a finished prefix)
  causal_bottom_right,   // keys t <= s_k - s_q + i (FlashAttention >= 2.1, the golden convention)
  causal_top_left,       // keys t <= i (FlashAttention before 2.1): only equal when s_q == s_k
};

struct PrefillInputs {
  int64_t heads = 0, d_qk = 0, d_v = 0;
  // bf16 bits, packed along the token axis: q [total_q, h, d_qk], k [total_k, h, d_qk],
  // v [total_k, h, d_v]
  std::span<const uint16_t> q, k, v;
  // [batch + 1] each: sequence i is rows cu_q[i]..cu_q[i+1] of q against rows cu_k[i]..cu_k[i+1]
  std::span<const int32_t> cu_seqlens_q, cu_seqlens_k;
  PrefillMask mask = PrefillMask::causal_bottom_right;
  double softmax_scale = 0;
};

struct PrefillResult {
  std::vector<double> out;  // [total_q, h, d_v]
  std::vector<double> lse;  // [h, total_q], natural log; +inf (and out 0) where a row attends nothing
};

// Throws mla::Error naming what is wrong with the inputs (sizes, cu_seqlens, scale).
PrefillResult prefill_attention(const PrefillInputs& in);

// Merges state a and state b, attended over disjoint keys: lse = log(e^lse_a + e^lse_b),
// out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b, evaluated relative to the larger lse so
// nothing overflows. An infinite lse (+inf or -inf) means that side attended nothing: its out
// is never read (NaN there is harmless). Both empty: out 0, lse -inf. out [n, h, d], lse [h, n].
struct MergeResult {
  std::vector<double> out, lse;
};
MergeResult merge_states(int64_t tokens, int64_t heads, int64_t head_dim, std::span<const double> out_a,
                         std::span<const double> lse_a, std::span<const double> out_b, std::span<const double> lse_b);

}  // namespace mla::ref
