// Device code of the paged-cache append: a check pass that flags every token past capacity,
// then a write pass (one warp per token) that does nothing if anything was flagged. Written
// against detail/device_compat.cuh so that the warp simulator (suites/gpu/sim) runs the same
// source on the host; production code includes it from cache_append.cu only.
#pragma once

#include <cstdint>

#include "detail/cache_append_launch.hpp"
#include "detail/device_compat.cuh"

namespace mla::cuda::detail::append {

constexpr int kTokensPerBlock = 4;  // one warp each

constexpr int kLatent = 512, kRope = 64, kD = 576;

MLA_GLOBAL void append_check_kernel(const CacheAppendArgs a, int* flag) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.num_tokens) return;
  const int seq = a.seq_ids[i];
  const int pos = a.positions[i];
  int code = 0;
  if (seq < 0 || seq >= a.batch || pos < 0) {
    code = kAppendBadArgument;
  } else if (pos >= a.max_seq_len) {
    code = kAppendPastMaxSeqLen;
  } else {
    const int page = pos / a.page_size;
    if (page >= a.max_blocks) {
      code = kAppendPastBlockTable;
    } else {
      const int32_t blk = a.block_table[int64_t{seq} * a.max_blocks + page];
      if (blk < 0 || blk >= a.num_blocks) code = kAppendPageMissing;
    }
  }
  if (code != 0) {
    MLA_ATOMIC_OR(&flag[0], code);
    MLA_ATOMIC_MIN(&flag[code == kAppendBadArgument ? 1 : 2], i);
  }
}

MLA_DEV float load_act(const CacheAppendArgs& a, const void* base, int64_t idx) {
  if (a.dtype == ActivationDType::f32) return static_cast<const float*>(base)[idx];
  return __bfloat162float(__ushort_as_bfloat16(static_cast<const uint16_t*>(base)[idx]));
}

MLA_DEV uint16_t to_bf16(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

MLA_GLOBAL void MLA_BOUNDS(32 * kTokensPerBlock, 1)
    append_write_kernel(const CacheAppendArgs a, const int* flag) {
  if (flag[0] != 0) return;  // all or nothing: a rejected call leaves the cache as it was
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * kTokensPerBlock + (threadIdx.x >> 5);
  if (i >= a.num_tokens) return;
  const int seq = a.seq_ids[i];
  const int pos = a.positions[i];
  const int32_t blk = a.block_table[int64_t{seq} * a.max_blocks + pos / a.page_size];
  uint16_t* dst = a.kv_cache + (int64_t{blk} * a.page_size + pos % a.page_size) * kD;

  // kv_norm: y = x · 1/sqrt(mean(x²) + eps) · w in fp32; lane handles elements lane + 32k.
  float x[kLatent / 32];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kLatent / 32; ++k) {
    x[k] = load_act(a, a.latent, int64_t{i} * kLatent + lane + 32 * k);
    ss += x[k] * x[k];
  }
  for (int o = 16; o > 0; o >>= 1) ss += MLA_SHFL_XOR(ss, o);
  const float inv_rms = 1.f / sqrtf(ss / static_cast<float>(kLatent) + a.eps);
#pragma unroll
  for (int k = 0; k < kLatent / 32; ++k) {
    const int j = lane + 32 * k;
    dst[j] = to_bf16(x[k] * inv_rms * a.kv_norm_weight[j]);
  }

  // Interleaved RoPE: lane rotates the pair (2·lane, 2·lane+1) by pos·inv_freq[lane]. The angle
  // and its sine/cosine are taken in fp64: an fp32 angle is off by up to ~6e-4 rad near
  // position 16K (FIELD-NOTES), far more than the bf16 result can hide.
  const float x0 = load_act(a, a.k_pe, int64_t{i} * kRope + 2 * lane);
  const float x1 = load_act(a, a.k_pe, int64_t{i} * kRope + 2 * lane + 1);
  double sn = 0.0, cs = 1.0;
  sincos(static_cast<double>(pos) * a.inv_freq[lane], &sn, &cs);
  const float c = static_cast<float>(cs), s = static_cast<float>(sn);
  const float y0 = x0 * c - x1 * s;
  const float y1 = x0 * s + x1 * c;
  *reinterpret_cast<uint32_t*>(dst + kLatent + 2 * lane) =
      static_cast<uint32_t>(to_bf16(y0)) | (static_cast<uint32_t>(to_bf16(y1)) << 16);
}

}  // namespace mla::cuda::detail::append
