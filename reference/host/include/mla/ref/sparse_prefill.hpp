// The sparse prefill's truth and its deployed-precision reference (mla/core/sparse_prefill.hpp):
// the decode core's oracle and same-dtype pipeline on the call made one sparse decode call
// (sparse_prefill_as_decode), the sink applied to out after, lse laid out [s_q, h], and each row's
// max_logits computed beside them.
#pragma once

#include "mla/core/sparse_prefill.hpp"

namespace mla::ref {

// float64 on the exact bf16 values: out, max_logits (the largest sm_scale·q·k of the row's keys),
// lse. Validates the inputs (mla::Error naming what is wrong).
SparsePrefillOutputs sparse_prefill_fp64(const SparsePrefillInputs& in);

// What a correct bf16 kernel computes (mla/ref/same_dtype.hpp's recipe): float32 scores of the
// bf16 values, float32 softmax, P rounded to bf16, float32 P·V, the sink's weight in float32, out
// rounded to `output` (bf16, or f32 for the bf16-operand class with float32 output); max_logits
// and lse float32.
SparsePrefillOutputs sparse_prefill_same_dtype(const SparsePrefillInputs& in, OutDType output = OutDType::bf16);

}  // namespace mla::ref
