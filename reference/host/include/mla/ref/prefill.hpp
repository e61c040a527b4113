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

#include "mla/core/merge.hpp"
#include "mla/core/prefill.hpp"

namespace mla::ref {

// The attention of `in` (mla/core/prefill.hpp, validated by validate_prefill_inputs) in float64:
// out [total_q, h, d_v] and lse [h, total_q] in the canonical convention (natural log; out 0 and
// lse +inf where a row attends nothing), dtype f64. A causal shape is masked with `alignment`:
// bottom-right is the contract's (and the goldens'); top-left (FlashAttention before 2.1) is
// there to compute what a kernel of that convention gives, e.g. to show a judge catches it.
// Throws mla::Error (UnsupportedError for widths other than 192/128) naming what is wrong.
PrefillOutputs prefill_attention(const PrefillInputs& in, CausalAlignment alignment = CausalAlignment::bottom_right);

// The same prefill at deployed precision (src/prefill_same_dtype.cpp; fixtures/SCHEMA.md's
// prefill same_dtype recipe): float32 scores and softmax over the exact bf16 inputs, P rounded to
// bf16, float32 P·V, output rounded to bf16 (`output` bf16) or left in float32 (f32: the
// bf16-operand class's witness). lse float32 values. The reference FlashAttention's error-ratio
// rule measures a kernel against (judge_prefill); the goldens store it for their cases, this
// computes it for any other input. Throws mla::Error for f64 or malformed inputs.
PrefillOutputs prefill_same_dtype(const PrefillInputs& in, OutDType output = OutDType::bf16);

// Merges state a and state b, attended over disjoint keys: lse = log(e^lse_a + e^lse_b),
// out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b, evaluated relative to the larger lse so
// nothing overflows. An infinite lse (+inf or -inf) means that side attended nothing: its out
// is never read (NaN there is harmless). Both empty: out 0, lse -inf. out [n, h, d], lse [h, n].
struct MergeResult {
  std::vector<double> out, lse;
};
MergeResult merge_states(int64_t tokens, int64_t heads, int64_t head_dim, std::span<const double> out_a,
                         std::span<const double> lse_a, std::span<const double> out_b, std::span<const double> lse_b);
// The fp64 truth of a canonical merge: merge_states on `in`'s values, widened exactly from its
// state dtype (what the certifier and the benchmarks judge a merge kernel against).
MergeResult merge_states(const MergeInputs& in);

}  // namespace mla::ref
