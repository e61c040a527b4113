// Internal interface between the naive prefill host code (naive_prefill.cpp) and its kernels
// (naive_prefill.cu): plain pointers and integers only.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace mla::cuda::detail {

// The row softmax of one chunk (detail/naive_prefill_plan.hpp): scores S [h, rows, s_k] (fp32,
// unscaled) to probabilities P [h, rows, s_k] in bf16, exactly 0 past each row's limit (the
// bottom-right causal mask of a sequence with s_q queries, the chunk's first row being row0, or
// every key), and lse (natural log; +inf for a row with no key) at
// lse[hh·lse_stride + lse_first + i] for head hh and chunk row i.
void prefill_softmax(const float* scores, uint16_t* probs, float* lse, int heads, int rows, int64_t s_k,
                     int64_t s_q, int64_t row0, int causal, float scale, int64_t lse_stride, int64_t lse_first,
                     cudaStream_t stream);

// The s_q rows of a sequence without keys: out [s_q, h, 128] (at the sequence's first row) = 0
// and lse[hh·lse_stride + lse_first + i] = +inf.
void prefill_empty(uint16_t* out, float* lse, int heads, int64_t s_q, int64_t lse_stride, int64_t lse_first,
                   cudaStream_t stream);

}  // namespace mla::cuda::detail
