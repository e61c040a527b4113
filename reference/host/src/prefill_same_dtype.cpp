// The MHA-form prefill at deployed precision: fixtures/SCHEMA.md's prefill `same_dtype` recipe,
// what a correct bf16 prefill kernel computes. Row by row (rows are independent, so the thread
// count moves no bit): the exact bf16 inputs as float32, each score a float32 sum of its 192
// products in order times float32(scale), float32 max, exp and sum (in key order), lse = max +
// log(sum), P = bf16(e / sum), each output column a float32 sum in key order, rounded to bf16
// (or left in float32 for the bf16-operand class). Empty rows: out 0, lse +inf.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/ref/prefill.hpp"

namespace mla::ref {
namespace {

std::vector<float> widen_f32(std::span<const uint16_t> bits) {
  std::vector<float> v(bits.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(bits[i]);
  return v;
}

float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

}  // namespace

PrefillOutputs prefill_same_dtype(const PrefillInputs& in, OutDType output) {
  if (output == OutDType::f64) throw Error("prefill_same_dtype: the deployed-precision computation writes f32 or bf16");
  validate_prefill_inputs(in, "prefill_same_dtype");
  const auto& sh = in.shape;
  const int64_t H = sh.heads, dqk = sh.d_qk, dv = sh.d_v;
  const auto q = widen_f32(in.q), k = widen_f32(in.k), v = widen_f32(in.v);
  const auto seqs = prefill_sequences(in);
  std::vector<int32_t> row_seq(static_cast<std::size_t>(sh.total_q));
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    for (int64_t i = 0; i < seqs[b].s_q; ++i) row_seq[seqs[b].q_begin + i] = static_cast<int32_t>(b);
  }
  const float scale = static_cast<float>(in.softmax_scale);
  PrefillOutputs o;
  o.dtype = output;
  o.out.assign(static_cast<std::size_t>(sh.total_q * H * dv), 0.0);
  o.lse.assign(static_cast<std::size_t>(H * sh.total_q), std::numeric_limits<double>::infinity());
  // The same sums in the same order as the recipe says, laid out for speed: scores eight keys at
  // a time (eight independent sums; one alone waits on its previous add at every step) and P·V
  // with the keys outside, so each key's 128 values are read once, contiguously, and the 128
  // column sums advance together (each still in key order). The bench judges its prefill points
  // with this reference before timing them; the column-by-column form read V with a stride of
  // h·128 floats per product.
  constexpr int64_t kKeys = 8;
  parallel_for(static_cast<std::size_t>(sh.total_q * H), 8, [&](std::size_t begin, std::size_t end) {
    std::vector<float> p, acc(static_cast<std::size_t>(dv));
    for (std::size_t r = begin; r < end; ++r) {
      const int64_t t = static_cast<int64_t>(r) / H, h = static_cast<int64_t>(r) % H;
      const PrefillSequence& seq = seqs[static_cast<std::size_t>(row_seq[t])];
      const int64_t n = prefill_last_key(sh.causal, seq, t - seq.q_begin) + 1;
      if (n <= 0) continue;  // out 0, lse +inf
      p.resize(static_cast<std::size_t>(n));
      const float* qr = q.data() + static_cast<int64_t>(r) * dqk;
      const auto key = [&](int64_t j) { return k.data() + ((seq.k_begin + j) * H + h) * dqk; };
      int64_t j0 = 0;
      for (; j0 + kKeys <= n; j0 += kKeys) {
        float dots[kKeys] = {};
        const float* kr[kKeys];
        for (int64_t i = 0; i < kKeys; ++i) kr[i] = key(j0 + i);
        for (int64_t d = 0; d < dqk; ++d) {
          const float qd = qr[d];
          for (int64_t i = 0; i < kKeys; ++i) dots[i] += qd * kr[i][d];
        }
        for (int64_t i = 0; i < kKeys; ++i) p[j0 + i] = dots[i] * scale;
      }
      for (; j0 < n; ++j0) {
        const float* kr = key(j0);
        float dot = 0;
        for (int64_t d = 0; d < dqk; ++d) dot += qr[d] * kr[d];
        p[j0] = dot * scale;
      }
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) m = std::max(m, p[j]);
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - m));
      for (int64_t j = 0; j < n; ++j) p[j] = round_bf16(p[j] / sum);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const float pj = p[j];
        const float* vr = v.data() + ((seq.k_begin + j) * H + h) * dv;
        for (int64_t d = 0; d < dv; ++d) acc[d] += pj * vr[d];
      }
      double* out = o.out.data() + static_cast<int64_t>(r) * dv;
      for (int64_t d = 0; d < dv; ++d) out[d] = output == OutDType::bf16 ? round_bf16(acc[d]) : acc[d];
      o.lse[h * sh.total_q + t] = m + std::log(sum);
    }
  });
  return o;
}

}  // namespace mla::ref
