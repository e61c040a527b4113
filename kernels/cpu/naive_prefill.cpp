// cpu_prefill_naive_fp32: MLA's prefill in the MHA form (mla/core/prefill.hpp) the way a plain
// attention loop computes it, the baseline optimized prefill kernels are measured against. The
// inputs are bf16 values; everything after reading them is float32: per query row, the scores of
// the keys its mask lets it attend, their maximum, exp() relative to it, a pairwise sum, and
// P·V normalised once at the end; lse = max + log(sum). Rows are independent, so they are cut
// between threads without changing any bit. Canonical conventions; out float32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/threads.hpp"

namespace mla::cpu {
namespace {

std::vector<float> widen(std::span<const uint16_t> bits) {
  std::vector<float> v(bits.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(bits[i]);
  return v;
}

class NaivePrefillPrepared final : public PreparedPrefill {
 public:
  explicit NaivePrefillPrepared(const PrefillInputs& in)
      : shape_(in.shape),
        scale_(static_cast<float>(in.softmax_scale)),
        q_(widen(in.q)),
        k_(widen(in.k)),
        v_(widen(in.v)),
        seqs_(prefill_sequences(in)),
        out_(static_cast<std::size_t>(in.shape.total_q * in.shape.heads * in.shape.d_v)),
        lse_(static_cast<std::size_t>(in.shape.heads * in.shape.total_q)) {
    // Which sequence each query row belongs to, found once (run() is the timed part).
    row_seq_.resize(static_cast<std::size_t>(shape_.total_q));
    for (std::size_t b = 0; b < seqs_.size(); ++b) {
      for (int64_t i = 0; i < seqs_[b].s_q; ++i) row_seq_[seqs_[b].q_begin + i] = static_cast<int32_t>(b);
    }
  }

  void run() override {
    const int64_t rows = shape_.total_q * shape_.heads;
    parallel_for(static_cast<std::size_t>(rows), 16, [&](std::size_t begin, std::size_t end) {
      std::vector<float> p;
      for (std::size_t r = begin; r < end; ++r) row(static_cast<int64_t>(r), p);
    });
  }

  PrefillOutputs results() override {
    PrefillOutputs o;
    o.dtype = OutDType::f32;
    o.out.assign(out_.begin(), out_.end());
    o.lse.assign(lse_.begin(), lse_.end());
    return o;
  }

 private:
  // Query row t (of total_q) at head h: r = t·heads + h, the layout of out.
  void row(int64_t r, std::vector<float>& p) {
    const int64_t H = shape_.heads, dqk = shape_.d_qk, dv = shape_.d_v;
    const int64_t t = r / H, h = r % H;
    const PrefillSequence& seq = seqs_[static_cast<std::size_t>(row_seq_[t])];
    const int64_t last = prefill_last_key(shape_.causal, seq, t - seq.q_begin);
    float* o = out_.data() + r * dv;
    std::fill(o, o + dv, 0.0f);
    if (last < 0) {
      lse_[h * shape_.total_q + t] = std::numeric_limits<float>::infinity();
      return;
    }
    const int64_t n = last + 1;
    p.resize(static_cast<std::size_t>(n));
    const float* q = q_.data() + r * dqk;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const float* k = k_.data() + ((seq.k_begin + j) * H + h) * dqk;
      float dot = 0;
      for (int64_t d = 0; d < dqk; ++d) dot += q[d] * k[d];
      p[j] = dot * scale_;
      m = std::max(m, p[j]);
    }
    for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] - m);
    const float sum = pairwise_sum(p.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_.data() + ((seq.k_begin + j) * H + h) * dv;
      for (int64_t d = 0; d < dv; ++d) o[d] += p[j] * v[d];
    }
    for (int64_t d = 0; d < dv; ++d) o[d] /= sum;
    lse_[h * shape_.total_q + t] = m + std::log(sum);
  }

  PrefillShape shape_;
  float scale_;
  std::vector<float> q_, k_, v_;
  std::vector<PrefillSequence> seqs_;
  std::vector<int32_t> row_seq_;
  std::vector<float> out_, lse_;
};

class NaivePrefill final : public PrefillImpl {
 public:
  NaivePrefill() {
    info_.name = "cpu_prefill_naive_fp32";
    info_.backend = "cpu";
    info_.description = "MHA-form prefill as a plain float32 attention loop over bf16 inputs (row by row, pairwise sums)";
    info_.role = KernelRole::baseline;
    info_.out_dtype = OutDType::f32;
    info_.compute = ComputePrecision{OutDType::f32, OutDType::f32};
  }
  const PrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedPrefill> prepare(const PrefillInputs& in) const override {
    validate_prefill_inputs(in, info_.name);
    if (auto why = check(in)) throw UnsupportedError(info_.name + ": " + *why);
    return std::make_unique<NaivePrefillPrepared>(in);
  }

 private:
  PrefillKernelInfo info_;
};

}  // namespace
}  // namespace mla::cpu

namespace mla::builtin {
std::unique_ptr<PrefillImpl> make_cpu_prefill_naive_fp32() { return std::make_unique<cpu::NaivePrefill>(); }
}  // namespace mla::builtin
