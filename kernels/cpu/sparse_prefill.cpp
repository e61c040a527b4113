// cpu_sparse_prefill_f32: FlashMLA's sparse prefill (mla/core/sparse_prefill.hpp) as its own
// reference computes it, in float32: each row gathers the keys its indices name, float32 scores
// of the bf16 values, a float32 softmax with the sink in the denominator, float32 P·V, out in
// float32. A baseline of another code path than the oracles (which go through the decode core).
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/core/sparse_prefill.hpp"

namespace mla::builtin {
namespace {

class Prepared final : public PreparedSparsePrefill {
 public:
  explicit Prepared(const SparsePrefillInputs& in) : in_(in) {
    const auto& s = in_.shape;
    q_.resize(in_.q.size());
    kv_.resize(in_.kv.size());
    for (std::size_t i = 0; i < q_.size(); ++i) q_[i] = bf16_to_float(in_.q[i]);
    for (std::size_t i = 0; i < kv_.size(); ++i) kv_[i] = bf16_to_float(in_.kv[i]);
    out_.assign(static_cast<std::size_t>(s.s_q * s.heads * kSparsePrefillDv), 0.0f);
    max_.assign(static_cast<std::size_t>(s.s_q * s.heads), 0.0f);
    lse_.assign(max_.size(), 0.0f);
  }
  void run() override {
    const auto& s = in_.shape;
    const SparsePrefillInputs in = in_.view();
    const float scale = static_cast<float>(in.sm_scale);
    std::vector<int64_t> keys;
    std::vector<float> p;
    for (int64_t i = 0; i < s.s_q; ++i) {
      keys.clear();
      for (int64_t j = 0; j < s.topk; ++j) {
        if (sparse_prefill_key(in, i, j)) keys.push_back(in.indices[static_cast<std::size_t>(i * s.topk + j)]);
      }
      for (int h = 0; h < s.heads; ++h) {
        const auto row = static_cast<std::size_t>(i * s.heads + h);
        float* o = out_.data() + row * kSparsePrefillDv;
        std::fill(o, o + kSparsePrefillDv, 0.0f);
        if (keys.empty()) {
          max_[row] = -std::numeric_limits<float>::infinity();
          lse_[row] = std::numeric_limits<float>::infinity();
          continue;
        }
        const float* q = q_.data() + row * static_cast<std::size_t>(s.d_qk);
        p.assign(keys.size(), 0.0f);
        float m = -std::numeric_limits<float>::infinity();
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const float* kv = kv_.data() + static_cast<std::size_t>(keys[k] * s.d_qk);
          float dot = 0;
          for (int d = 0; d < s.d_qk; ++d) dot += q[d] * kv[d];
          p[k] = dot * scale;
          m = std::max(m, p[k]);
        }
        float sum = 0;
        for (float& x : p) sum += (x = std::exp(x - m));
        float denom = sum;
        if (s.sink) denom += std::exp(in.attn_sink[static_cast<std::size_t>(h)] - m);
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const float w = p[k] / denom;
          const float* v = kv_.data() + static_cast<std::size_t>(keys[k] * s.d_qk);
          for (int d = 0; d < kSparsePrefillDv; ++d) o[d] += w * v[d];
        }
        max_[row] = m;
        lse_[row] = m + std::log(sum);
      }
    }
  }
  SparsePrefillOutputs results() override {
    SparsePrefillOutputs r;
    r.dtype = OutDType::f32;
    r.out.assign(out_.begin(), out_.end());
    r.max_logits.assign(max_.begin(), max_.end());
    r.lse.assign(lse_.begin(), lse_.end());
    return r;
  }

 private:
  SparsePrefillBuffers in_;
  std::vector<float> q_, kv_, out_, max_, lse_;
};

class Kernel final : public SparsePrefillImpl {
 public:
  Kernel() {
    info_.name = "cpu_sparse_prefill_f32";
    info_.backend = "cpu";
    info_.description =
        "FlashMLA's sparse prefill as its reference computes it: gathered keys, float32 scores, softmax with the sink, "
        "float32 P·V and output";
    info_.role = KernelRole::baseline;
    info_.out_dtype = OutDType::f32;
    info_.compute = ComputePrecision{OutDType::f32, OutDType::f32};
  }
  const SparsePrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedSparsePrefill> prepare(const SparsePrefillInputs& in) const override {
    validate_sparse_prefill_inputs(in, info_.name);
    return std::make_unique<Prepared>(in);
  }

 private:
  SparsePrefillKernelInfo info_;
};

}  // namespace

std::unique_ptr<SparsePrefillImpl> make_cpu_sparse_prefill_f32() { return std::make_unique<Kernel>(); }

}  // namespace mla::builtin
