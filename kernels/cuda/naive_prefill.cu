// Kernels of the naive MHA-form prefill baseline: the row softmax between its two cuBLAS calls and
// the rows of a sequence without keys. The GEMMs are cuBLAS (naive_prefill.cpp).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "detail/naive_prefill_launch.hpp"
#include "detail/block_reduce.cuh"
#include "mla/cuda/check.hpp"

namespace mla::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kDv = 128;

// One block per (head, chunk row): blockIdx.x = hh·rows + i.
__global__ void __launch_bounds__(kThreads) softmax_kernel(const float* __restrict__ scores,
                                                           uint16_t* __restrict__ probs, float* __restrict__ lse,
                                                           int rows, int64_t s_k, int64_t s_q, int64_t row0,
                                                           int causal, float scale, int64_t lse_stride,
                                                           int64_t lse_first) {
  __shared__ float red[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int64_t hh = row / rows, i = row % rows;
  const float* srow = scores + row * s_k;
  uint16_t* prow = probs + row * s_k;
  // Bottom-right alignment: query row r of s_q attends keys 0 .. s_k - s_q + r.
  int64_t limit = s_k;
  if (causal) {
    limit = s_k - s_q + row0 + i + 1;
    limit = limit < 0 ? 0 : (limit > s_k ? s_k : limit);
  }
  float* l = lse + hh * lse_stride + lse_first + i;
  if (limit == 0) {
    for (int64_t j = threadIdx.x; j < s_k; j += kThreads) prow[j] = 0;
    if (threadIdx.x == 0) *l = __int_as_float(0x7f800000);
    return;
  }
  float m = __int_as_float(0xff800000);
  for (int64_t j = threadIdx.x; j < limit; j += kThreads) m = fmaxf(m, srow[j] * scale);
  m = block_reduce<kThreads, true>(m, red);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < limit; j += kThreads) sum += expf(srow[j] * scale - m);
  sum = block_reduce<kThreads, false>(sum, red);
  for (int64_t j = threadIdx.x; j < s_k; j += kThreads) {
    const float p = j < limit ? expf(srow[j] * scale - m) / sum : 0.f;
    prow[j] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  }
  if (threadIdx.x == 0) *l = m + logf(sum);
}

// One thread per (row, head): out's 128 values of that row and head, and its lse.
__global__ void empty_kernel(uint16_t* __restrict__ out, float* __restrict__ lse, int heads, int64_t s_q,
                             int64_t lse_stride, int64_t lse_first) {
  const int64_t x = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (x >= s_q * heads) return;
  const int64_t r = x / heads, hh = x % heads;
  uint16_t* o = out + x * kDv;
  for (int c = 0; c < kDv; ++c) o[c] = 0;
  lse[hh * lse_stride + lse_first + r] = __int_as_float(0x7f800000);
}

}  // namespace

void prefill_softmax(const float* scores, uint16_t* probs, float* lse, int heads, int rows, int64_t s_k,
                     int64_t s_q, int64_t row0, int causal, float scale, int64_t lse_stride, int64_t lse_first,
                     cudaStream_t stream) {
  const int64_t blocks = int64_t{heads} * rows;
  if (blocks == 0) return;
  softmax_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(scores, probs, lse, rows, s_k, s_q, row0,
                                                                        causal, scale, lse_stride, lse_first);
  MLA_CUDA_CHECK(cudaGetLastError());
}

void prefill_empty(uint16_t* out, float* lse, int heads, int64_t s_q, int64_t lse_stride, int64_t lse_first,
                   cudaStream_t stream) {
  const int64_t n = s_q * heads;
  if (n == 0) return;
  empty_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, lse, heads, s_q, lse_stride,
                                                                          lse_first);
  MLA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mla::cuda::detail
