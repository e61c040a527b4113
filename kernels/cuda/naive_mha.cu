// Kernels of the naive MHA baseline: the per-head gather and the row softmax. The GEMMs are
// cuBLAS (naive_mha.cpp).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <limits>

#include "detail/naive_mha_launch.hpp"
#include "detail/block_reduce.cuh"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {
namespace {

constexpr int kD = 576, kDv = 512;
constexpr int kSoftmaxThreads = 256;

// One block per token: threads 0..71 each move one 16-byte chunk of the 576-wide token row to
// every head's K, and chunks 0..63 (the latent) to every head's V.
__global__ void __launch_bounds__(128) gather_kernel(const uint16_t* __restrict__ cache,
                                                     const int32_t* __restrict__ block_table_row,
                                                     int page_size, int L, int heads,
                                                     uint16_t* __restrict__ k,
                                                     uint16_t* __restrict__ v) {
  const int t = blockIdx.x;
  const int c = threadIdx.x;
  if (c >= kD / 8) return;
  const int64_t slot = int64_t{block_table_row[t / page_size]} * page_size + t % page_size;
  const uint4 val = *reinterpret_cast<const uint4*>(cache + slot * kD + c * 8);
  for (int h = 0; h < heads; ++h) {
    const int64_t row = int64_t{h} * L + t;
    *reinterpret_cast<uint4*>(k + row * kD + c * 8) = val;
    if (c < kDv / 8) *reinterpret_cast<uint4*>(v + row * kDv + c * 8) = val;
  }
}

__global__ void __launch_bounds__(kSoftmaxThreads) softmax_kernel(const float* __restrict__ scores,
                                                                  uint16_t* __restrict__ probs,
                                                                  float* __restrict__ lse, int L,
                                                                  int s_q, int causal, float scale) {
  __shared__ float red[kSoftmaxThreads / 32];
  const int row = blockIdx.x;  // h·s_q + s
  const int s = row % s_q;
  const float* srow = scores + int64_t{row} * L;
  uint16_t* prow = probs + int64_t{row} * L;
  // Query s of s_q attends 0 .. L - s_q + s (causal) or everything.
  const int limit = causal ? min(L, max(0, L - s_q + s + 1)) : L;
  if (limit == 0) {
    for (int j = threadIdx.x; j < L; j += kSoftmaxThreads) prow[j] = 0;
    if (threadIdx.x == 0) lse[row] = __int_as_float(0x7f800000);
    return;
  }
  float m = __int_as_float(0xff800000);
  for (int j = threadIdx.x; j < limit; j += kSoftmaxThreads) m = fmaxf(m, srow[j] * scale);
  m = block_reduce<kSoftmaxThreads, true>(m, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j < limit; j += kSoftmaxThreads) sum += expf(srow[j] * scale - m);
  sum = block_reduce<kSoftmaxThreads, false>(sum, red);
  for (int j = threadIdx.x; j < L; j += kSoftmaxThreads) {
    const float p = j < limit ? expf(srow[j] * scale - m) / sum : 0.f;
    prow[j] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  }
  if (threadIdx.x == 0) lse[row] = m + logf(sum);
}

__global__ void fill_f32_kernel(float* p, int64_t n, float value) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

}  // namespace

void naive_gather(const uint16_t* cache, const int32_t* block_table_row, int page_size, int L,
                  int heads, uint16_t* k, uint16_t* v, cudaStream_t stream) {
  if (L <= 0) return;
  gather_kernel<<<static_cast<unsigned>(L), 128, 0, stream>>>(cache, block_table_row, page_size, L,
                                                               heads, k, v);
  MLA_CUDA_CHECK(cudaGetLastError());
}

void naive_softmax(const float* scores, uint16_t* probs, float* lse, int L, int s_q, int heads,
                   int causal, float scale, cudaStream_t stream) {
  softmax_kernel<<<static_cast<unsigned>(heads * s_q), kSoftmaxThreads, 0, stream>>>(
      scores, probs, lse, L, s_q, causal, scale);
  MLA_CUDA_CHECK(cudaGetLastError());
}

void naive_empty(uint16_t* out, float* lse, int s_q, int heads, cudaStream_t stream) {
  const int64_t n_out = int64_t{s_q} * heads * kDv;
  MLA_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(n_out) * sizeof(uint16_t), stream));
  const int64_t n_lse = int64_t{s_q} * heads;
  fill_f32_kernel<<<static_cast<unsigned>((n_lse + 255) / 256), 256, 0, stream>>>(
      lse, n_lse, std::numeric_limits<float>::infinity());
  MLA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mla::cuda::detail
