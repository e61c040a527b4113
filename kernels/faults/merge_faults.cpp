// The planted merge bugs (faults.hpp lists them). lse_base2_as_natural is the float64 oracle
// (mla::ref::merge_states) handed the base-2 lse its declaration makes the host send: the oracle
// merges them with e^x and log, which is the bug. pos_inf_lse_as_number lives in the arithmetic
// (which infinity counts as an empty side), so that arithmetic is written here: the float32
// merge of the deployed kernels with the -inf test alone.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/faults/faults.hpp"
#include "mla/ref/prefill.hpp"

namespace mla::faults {
namespace {

enum class MergeFault { lse_base2_as_natural, pos_inf_lse_as_number };

// Values of `dtype` as doubles ([n, h, d] raw bytes), and back: each rounded once to the dtype.
std::vector<double> widen(StateDType dtype, std::span<const uint8_t> raw) {
  std::vector<double> v(raw.size() / bytes_per_value(dtype));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = state_value(dtype, raw, i);
  return v;
}
std::vector<double> rounded(StateDType dtype, const std::vector<double>& x) {
  std::vector<uint8_t> raw;
  raw.reserve(x.size() * bytes_per_value(dtype));
  for (const double v : x) append_state_value(dtype, v, raw);
  return widen(dtype, raw);
}

MergeOutputs merge_with_natural_log(const MergeBuffers& in) {
  const auto& s = in.shape;
  const std::vector<double> la(in.lse_a.begin(), in.lse_a.end()), lb(in.lse_b.begin(), in.lse_b.end());
  auto m = ref::merge_states(s.tokens, s.heads, s.head_dim, widen(s.dtype, in.out_a), la, widen(s.dtype, in.out_b), lb);
  return {s.dtype, rounded(s.dtype, m.out), std::move(m.lse)};
}

// A side is empty only when its lse is -inf; +inf enters max() and exp() like any number.
MergeOutputs merge_testing_neg_inf_only(const MergeBuffers& in) {
  const auto& s = in.shape;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const auto a = widen(s.dtype, in.out_a), b = widen(s.dtype, in.out_b);
  std::vector<double> out(a.size(), 0.0), lse(in.lse_a.size(), neg_inf);
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const std::size_t at = static_cast<std::size_t>(h * s.tokens + t);
      const float la = in.lse_a[at], lb = in.lse_b[at];
      const bool skip_a = la == neg_inf, skip_b = lb == neg_inf;
      if (skip_a && skip_b) continue;  // out 0, lse -inf
      const float m = skip_a ? lb : skip_b ? la : std::max(la, lb);
      const float xa = skip_a ? 0.0f : std::exp(la - m), xb = skip_b ? 0.0f : std::exp(lb - m);
      const float wa = xa / (xa + xb), wb = xb / (xa + xb);
      lse[at] = m + std::log(xa + xb);
      const std::size_t row = static_cast<std::size_t>((t * s.heads + h) * s.head_dim);
      for (std::size_t d = 0; d < static_cast<std::size_t>(s.head_dim); ++d) {
        float o = 0;
        if (!skip_a) o += wa * static_cast<float>(a[row + d]);
        if (!skip_b) o += wb * static_cast<float>(b[row + d]);
        out[row + d] = o;
      }
    }
  }
  return {s.dtype, rounded(s.dtype, out), std::move(lse)};
}

class FaultyMergePrepared final : public PreparedMerge {
 public:
  FaultyMergePrepared(const MergeInputs& in, MergeFault f) : in_(in), fault_(f) {}
  void run() override {
    result_ = fault_ == MergeFault::lse_base2_as_natural ? merge_with_natural_log(in_) : merge_testing_neg_inf_only(in_);
    ran_ = true;
  }
  MergeOutputs results() override {
    if (!ran_) throw Error("a merge fault kernel: results() before run()");
    return result_;
  }

 private:
  MergeBuffers in_;
  MergeFault fault_;
  MergeOutputs result_;
  bool ran_ = false;
};

class FaultyMerge final : public MergeImpl {
 public:
  FaultyMerge(MergeFault f, std::string name, std::string description) : fault_(f) {
    info_.name = std::move(name);
    info_.backend = "cpu";
    info_.description = std::move(description);
    info_.role = KernelRole::optimized;  // an implementation under test, never an oracle
    info_.dtypes = {StateDType::bf16, StateDType::f16, StateDType::f32};
    if (f == MergeFault::lse_base2_as_natural) info_.conventions.lse_base = LseBase::two;
  }
  const MergeKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedMerge> prepare(const MergeInputs& in) const override {
    validate_merge_inputs(in, info_.name);
    if (auto why = check(in.shape)) throw UnsupportedError(info_.name + ": " + *why);
    return std::make_unique<FaultyMergePrepared>(in, fault_);
  }

 private:
  MergeFault fault_;
  MergeKernelInfo info_;
};

struct MergeSpec {
  const char* name;
  MergeFault fault;
  const char* description;
};

const std::vector<MergeSpec>& merge_specs() {
  static const std::vector<MergeSpec> specs{
      {"lse_base2_as_natural", MergeFault::lse_base2_as_natural,
       "PERTURBED: merge declaring base-2 lse and merging them with e^x and log"},
      {"pos_inf_lse_as_number", MergeFault::pos_inf_lse_as_number,
       "PERTURBED: float32 merge testing for a -inf lse only, so +inf (an empty side) is merged as a number"},
  };
  return specs;
}

}  // namespace

const std::vector<std::string>& merge_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : merge_specs()) n.emplace_back(s.name);
    return n;
  }();
  return names;
}

std::unique_ptr<MergeImpl> make_merge(const std::string& name) {
  for (const auto& s : merge_specs()) {
    if (name == s.name) return std::make_unique<FaultyMerge>(s.fault, fmt::format("cpu_merge_{}", s.name), s.description);
  }
  throw Error(fmt::format("unknown merge fault kernel '{}' (known: {})", name, fmt::join(merge_names(), ", ")));
}

}  // namespace mla::faults
