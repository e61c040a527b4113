// Device code of the merge of two partial attention states (mla/core/merge.hpp):
//
//   lse = log(e^lse_a + e^lse_b),  out = e^(lse_a - lse)·out_a + e^(lse_b - lse)·out_b
//
// One block per (token, head) row: every thread computes the row's two weights (two exps and a
// log, cheaper than sharing them through shared memory and a barrier), thread 0 writes the lse,
// and the threads stride over the row's head_dim values. The weights are taken relative to the
// larger lse, so neither exp overflows; an infinite lse (+inf or -inf) is an empty side whose
// weight is 0 and whose out is never read (it may hold NaN); both sides empty give out 0 and lse
// -inf, never NaN. float32 throughout, the out rounded once to the state dtype: the arithmetic of
// vLLM's merge_attn_states and of cpu_merge_f32. Written against detail/device_compat.cuh so the
// warp simulator (suites/gpu/sim) runs this source on the host; production code includes it from
// merge.cu only.
#pragma once

#include <cstdint>

#include "detail/device_compat.cuh"
#include "detail/merge_launch.hpp"

namespace mla::cuda::detail::merge {
MLA_SIM_NAMESPACE_BEGIN

MLA_DEV bool is_infinite(float x) { return x == MLA_INT_AS_FLOAT(0x7f800000) || x == MLA_INT_AS_FLOAT(0xff800000); }

MLA_DEV float load(const MergeArgs& a, const void* base, int64_t i) {
  if (a.dtype == MergeDType::f32) return static_cast<const float*>(base)[i];
  return __bfloat162float(__ushort_as_bfloat16(static_cast<const uint16_t*>(base)[i]));
}

MLA_DEV void store(const MergeArgs& a, void* base, int64_t i, float x) {
  if (a.dtype == MergeDType::f32) {
    static_cast<float*>(base)[i] = x;
  } else {
    static_cast<uint16_t*>(base)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
}

MLA_GLOBAL void merge_kernel(const MergeArgs a) {
  const int64_t row = blockIdx.x;  // token * heads + head, as out's [tokens, heads] rows
  const int64_t t = row / a.heads, h = row % a.heads;
  const int64_t at_lse = h * a.tokens + t;
  const float la = a.lse_a[at_lse], lb = a.lse_b[at_lse];
  const bool ea = is_infinite(la), eb = is_infinite(lb);
  float wa = 0.0f, wb = 0.0f, l = MLA_INT_AS_FLOAT(0xff800000);
  if (!ea || !eb) {
    const float m = ea ? lb : eb ? la : fmaxf(la, lb);
    const float xa = ea ? 0.0f : expf(la - m), xb = eb ? 0.0f : expf(lb - m);
    const float sum = xa + xb;
    wa = xa / sum;
    wb = xb / sum;
    l = m + logf(sum);
  }
  if (threadIdx.x == 0) a.lse[at_lse] = l;
  for (int i = static_cast<int>(threadIdx.x); i < a.head_dim; i += static_cast<int>(blockDim.x)) {
    const int64_t at = row * a.head_dim + i;
    float o = 0.0f;
    if (!ea) o += wa * load(a, a.out_a, at);  // an empty side's out is never read
    if (!eb) o += wb * load(a, a.out_b, at);
    store(a, a.out, at, o);
  }
}

MLA_SIM_NAMESPACE_END
}  // namespace mla::cuda::detail::merge
