// The attention core at deployed precision on the host: fixtures/SCHEMA.md's `same_dtype`
// recipe, the computation a correct bf16 kernel performs: fp32 scores over the exact bf16 inputs,
// fp32 softmax, P rounded to bf16, fp32 P·V, output rounded to bf16, lse in fp32. An FP8 cache's
// dequantized values are rounded to bf16 first, as a kernel dequantizing into bf16 tiles sees
// them. Empty rows: out 0, lse +inf.
//
// Why it exists next to the truth: FlashAttention's error-ratio rule (docs/field.md, "Tolerance
// methods in use") bounds a kernel's error by k times this reference's own error against the
// truth; the goldens store it for their cases, this computes it for any other input.
#pragma once

#include "mla/core/attention.hpp"
#include "mla/ref/attention.hpp"

namespace mla::ref {

// out [b, s_q, h, 512] (exact bf16 values), lse [b, h, s_q] (fp32 values). Reads only tokens
// < L through the validated paged-cache accessor. `output` f32 leaves the fp32 P·V sums unrounded:
// the computation of the precision class bf16/f32/f32 (bf16 operands, fp32 accumulation, fp32
// output), the witness its tolerance entries are measured with.
AttnResult attention_same_dtype(const AttnInputs& in, OutDType output = OutDType::bf16);

}  // namespace mla::ref
