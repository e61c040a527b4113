#include "mla/ref/sparse_prefill.hpp"

#include <cmath>
#include <limits>

#include "mla/core/numeric.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/same_dtype.hpp"

namespace mla::ref {
namespace {

// The decode core's result of the call, out kept, lse [1, h, s_q] made [s_q, h]; an empty call
// (no query row, which a decode call cannot be) answers itself.
template <class Attend>
SparsePrefillOutputs through_decode(const SparsePrefillInputs& in, OutDType dtype, Attend attend) {
  validate_sparse_prefill_inputs(in, "sparse prefill");
  const auto& s = in.shape;
  SparsePrefillOutputs o;
  o.dtype = dtype;
  if (s.s_q == 0) return o;
  const AttnBuffers call = sparse_prefill_as_decode(in);
  AttnResult r = attend(call.view());
  o.out = std::move(r.out);
  o.lse.resize(static_cast<std::size_t>(s.s_q * s.heads));
  for (int64_t i = 0; i < s.s_q; ++i) {
    for (int h = 0; h < s.heads; ++h) o.lse[static_cast<std::size_t>(i * s.heads + h)] = r.lse[static_cast<std::size_t>(h * s.s_q + i)];
  }
  return o;
}

// Each row's largest score over its keys, by `dot` (the precision's), -inf without a key.
template <class Dot>
std::vector<double> max_logits(const SparsePrefillInputs& in, Dot dot) {
  const auto& s = in.shape;
  std::vector<double> m(static_cast<std::size_t>(s.s_q * s.heads), -std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < s.s_q; ++i) {
    for (int64_t j = 0; j < s.topk; ++j) {
      if (!sparse_prefill_key(in, i, j)) continue;
      const int64_t idx = in.indices[static_cast<std::size_t>(i * s.topk + j)];
      const uint16_t* k = in.kv.data() + idx * s.d_qk;
      for (int h = 0; h < s.heads; ++h) {
        const uint16_t* q = in.q.data() + (i * s.heads + h) * s.d_qk;
        auto& x = m[static_cast<std::size_t>(i * s.heads + h)];
        x = std::max(x, dot(q, k, s.d_qk));
      }
    }
  }
  return m;
}

}  // namespace

SparsePrefillOutputs sparse_prefill_fp64(const SparsePrefillInputs& in) {
  auto o = through_decode(in, OutDType::f64, [](const AttnInputs& d) { return attention_fp64(d); });
  sparse_prefill_apply_sink(in, o.out, o.lse);
  o.max_logits = max_logits(in, [&](const uint16_t* q, const uint16_t* k, int n) {
    double acc = 0;
    for (int d = 0; d < n; ++d) acc += static_cast<double>(bf16_to_float(q[d])) * static_cast<double>(bf16_to_float(k[d]));
    return in.sm_scale * acc;
  });
  return o;
}

SparsePrefillOutputs sparse_prefill_same_dtype(const SparsePrefillInputs& in, OutDType output) {
  // P·V unrounded when a sink follows: the deployed kernel divides by the sink-widened sum before
  // its one rounding of out, so the weight is applied to the float32 sums, then rounded once.
  const bool sink = in.shape.sink;
  auto o = through_decode(in, output, [&](const AttnInputs& d) {
    return attention_same_dtype(d, sink ? OutDType::f32 : output);
  });
  if (sink) {
    const auto& s = in.shape;
    for (int64_t i = 0; i < s.s_q; ++i) {
      for (int h = 0; h < s.heads; ++h) {
        const float l = static_cast<float>(o.lse[static_cast<std::size_t>(i * s.heads + h)]);
        if (!std::isfinite(l)) continue;
        const float w = 1.0f / (1.0f + std::exp(in.attn_sink[static_cast<std::size_t>(h)] - l));
        double* row = o.out.data() + static_cast<std::size_t>((i * s.heads + h) * kSparsePrefillDv);
        for (int d = 0; d < kSparsePrefillDv; ++d) {
          const float x = static_cast<float>(row[d]) * w;
          row[d] = output == OutDType::bf16 ? static_cast<double>(bf16_to_float(bf16_from_float(x))) : static_cast<double>(x);
        }
      }
    }
  }
  const float scale = static_cast<float>(in.sm_scale);
  o.max_logits = max_logits(in, [&](const uint16_t* q, const uint16_t* k, int n) {
    float acc = 0;
    for (int d = 0; d < n; ++d) acc += bf16_to_float(q[d]) * bf16_to_float(k[d]);
    return static_cast<double>(acc * scale);
  });
  return o;
}

}  // namespace mla::ref
