// Internal interface between the naive MHA host code (naive_mha.cpp) and its kernels
// (naive_mha.cu): plain pointers and integers only.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace mla::cuda::detail {

// Copies the L tokens of one sequence out of the paged cache into per-head K [h, L, 576] and
// V [h, L, 512] (the same latent repeated for every head, as a per-head cache would hold it);
// prepare()'s work, never the timed call's.
// `block_table_row` is the sequence's row of the block table (device memory); only its first
// ceil(L/ps) entries are read.
void naive_gather(const uint16_t* cache, const int32_t* block_table_row, int page_size, int L,
                  int heads, uint16_t* k, uint16_t* v, cudaStream_t stream);

// Row softmax of scores S [h, s_q, L] (fp32, unscaled): probabilities P [h, s_q, L] as bf16
// (exactly 0 where masked), lse [h, s_q] (natural log; +inf for a row with no key).
void naive_softmax(const float* scores, uint16_t* probs, float* lse, int L, int s_q, int heads,
                   int causal, float scale, cudaStream_t stream);

// A sequence with no cached token: out [s_q, h, 512] = 0 and lse [h, s_q] = +inf.
void naive_empty(uint16_t* out, float* lse, int s_q, int heads, cudaStream_t stream);

}  // namespace mla::cuda::detail
