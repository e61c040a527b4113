// Internal device code: the block-wide max and sum of the naive baselines' softmax kernels
// (naive_mha.cu, naive_prefill.cu). Deterministic: a fixed xor-shuffle tree per warp, then warp
// 0's lane reads the warps' results in a fixed order, so a row's max and sum are the same bits on
// every run. `red` is shared memory of kThreads / 32 floats; every thread of the block calls it.
#pragma once

namespace mla::cuda::detail {

template <int kThreads, bool kMax>
__device__ float block_reduce(float x, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = kMax ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // `red` may still be read from a previous reduction
  if (lane == 0) red[warp] = x;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kThreads / 32; ++w) r = kMax ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

}  // namespace mla::cuda::detail
