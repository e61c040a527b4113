// cpu_merge_f32: the merge of two partial attention states (mla/core/merge.hpp) as the deployed
// kernels compute it (vLLM's merge_attn_states, FlashInfer's merge_state): float32 throughout,
// relative to the larger lse so nothing overflows, an infinite lse an empty side, the merged out
// rounded once to the state dtype. The baseline merge kernels are measured against.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/threads.hpp"

namespace mla::cpu {
namespace {

class MergePrepared final : public PreparedMerge {
 public:
  explicit MergePrepared(const MergeInputs& in) : in_(in) {}
  void run() override {
    const auto& s = in_.shape;
    const int64_t rows = s.tokens * s.heads, d = s.head_dim;
    std::vector<double> out(static_cast<std::size_t>(rows * d));
    std::vector<double> lse(static_cast<std::size_t>(rows));
    const auto a_out = std::span<const uint8_t>(in_.out_a), b_out = std::span<const uint8_t>(in_.out_b);
    parallel_for(static_cast<std::size_t>(rows), 64, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const int64_t t = static_cast<int64_t>(r) / s.heads, h = static_cast<int64_t>(r) % s.heads;
        const float la = in_.lse_a[h * s.tokens + t], lb = in_.lse_b[h * s.tokens + t];
        const bool ea = std::isinf(la), eb = std::isinf(lb);
        float wa = 0, wb = 0, l = -std::numeric_limits<float>::infinity();
        if (!ea || !eb) {
          const float m = ea ? lb : eb ? la : std::max(la, lb);
          const float xa = ea ? 0.0f : std::exp(la - m), xb = eb ? 0.0f : std::exp(lb - m);
          const float sum = xa + xb;
          wa = xa / sum;
          wb = xb / sum;
          l = m + std::log(sum);
        }
        lse[h * s.tokens + t] = l;
        for (int64_t i = 0; i < d; ++i) {
          const std::size_t at = static_cast<std::size_t>(static_cast<int64_t>(r) * d + i);
          // An empty side's out is never read: it may be NaN.
          float o = 0;
          if (!ea) o += wa * static_cast<float>(state_value(s.dtype, a_out, at));
          if (!eb) o += wb * static_cast<float>(state_value(s.dtype, b_out, at));
          out[at] = o;
        }
      }
    });
    // The merged out in the state dtype: each value rounded once from float32.
    std::vector<uint8_t> raw;
    raw.reserve(out.size() * bytes_per_value(s.dtype));
    for (const double x : out) append_state_value(s.dtype, x, raw);
    result_.dtype = s.dtype;
    result_.out.resize(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) result_.out[i] = state_value(s.dtype, raw, i);
    result_.lse = std::move(lse);
  }
  MergeOutputs results() override { return result_; }

 private:
  MergeBuffers in_;
  MergeOutputs result_;
};

class MergeF32 final : public MergeImpl {
 public:
  MergeF32() {
    info_.name = "cpu_merge_f32";
    info_.backend = "cpu";
    info_.description = "merge of two attention states in float32 (weights relative to the larger lse), out rounded to the state dtype";
    info_.role = KernelRole::baseline;
    info_.dtypes = {StateDType::bf16, StateDType::f16, StateDType::f32};
  }
  const MergeKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedMerge> prepare(const MergeInputs& in) const override {
    validate_merge_inputs(in, info_.name);
    if (auto why = check(in.shape)) throw UnsupportedError(info_.name + ": " + *why);
    return std::make_unique<MergePrepared>(in);
  }

 private:
  MergeKernelInfo info_;
};

}  // namespace
}  // namespace mla::cpu

namespace mla::builtin {
std::unique_ptr<MergeImpl> make_cpu_merge_f32() { return std::make_unique<cpu::MergeF32>(); }
}  // namespace mla::builtin
