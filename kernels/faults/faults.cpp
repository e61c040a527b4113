#include "mla/faults/faults.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/registry/registry.hpp"

namespace mla::faults {
namespace {

enum class Fault { dropped_last, throws, leaky, bf16_only, untuned_heads };

// untuned_heads: the head counts between its two tuned tile sizes (16 and 64) take a padded
// path that never writes the last head. The catalog has no head count in that range, so only
// cases drawn at run time (the fresh family's odd head counts) can see it.
constexpr int kUntunedHeadsLo = 17, kUntunedHeadsHi = 47;

// The inputs the oracle sees instead of the real ones for `dropped_last`: every row's key list
// without position L-1. Sparse rows lose their index L-1 (it becomes -1, which every
// implementation skips); dense rows become sparse rows listing positions 0 ..
// min(last visible, L-2), so the causal alignment of s_q > 1 stays the real one.
AttnBuffers without_last_token(const AttnInputs& in) {
  AttnBuffers b(in);
  const AttnShape& s = in.shape;
  if (s.topk > 0) {
    for (int64_t i = 0; i < s.batch; ++i) {
      const int32_t last = in.cache_seqlens[static_cast<std::size_t>(i)] - 1;
      for (int64_t k = 0; k < int64_t{s.s_q} * s.topk; ++k) {
        int32_t& idx = b.indices[static_cast<std::size_t>(i * s.s_q * s.topk + k)];
        if (idx == last) idx = -1;
      }
    }
    return b;
  }
  std::vector<std::vector<int32_t>> rows;
  std::size_t topk = 1;
  for (int64_t i = 0; i < s.batch; ++i) {
    const int64_t L = in.cache_seqlens[static_cast<std::size_t>(i)];
    for (int64_t q = 0; q < s.s_q; ++q) {
      std::vector<int32_t> row;
      for (int64_t t = 0; t <= std::min(dense_last_position(s, L, q), L - 2); ++t) row.push_back(static_cast<int32_t>(t));
      topk = std::max(topk, row.size());
      rows.push_back(std::move(row));
    }
  }
  b.shape.topk = static_cast<int>(topk);
  b.indices.assign(rows.size() * topk, -1);
  for (std::size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), b.indices.begin() + r * topk);
  return b;
}

class FaultyPrepared final : public PreparedAttention {
 public:
  FaultyPrepared(std::unique_ptr<PreparedAttention> inner, Fault f, int heads)
      : inner_(std::move(inner)), fault_(f), heads_(heads) {}
  void run() override {
    if (fault_ == Fault::throws) throw Error("injected failure in run()");
    inner_->run();
    ++runs_;
  }
  AttnOutputs results() override {
    auto r = inner_->results();
    if (fault_ == Fault::leaky && runs_ > 1 && !r.out.empty()) r.out.front() = std::numeric_limits<double>::quiet_NaN();
    if (fault_ == Fault::untuned_heads && heads_ >= kUntunedHeadsLo && heads_ <= kUntunedHeadsHi) {
      // out is [b, s_q, h, 512]: every row's last head stays zero.
      const std::size_t dv = 512, h = static_cast<std::size_t>(heads_);
      for (std::size_t row = 0; (row + 1) * h * dv <= r.out.size(); ++row) {
        std::fill_n(r.out.begin() + static_cast<std::ptrdiff_t>((row * h + h - 1) * dv), dv, 0.0);
      }
    }
    return r;
  }
  void synchronize() override { inner_->synchronize(); }

 private:
  std::unique_ptr<PreparedAttention> inner_;
  Fault fault_;
  int heads_;
  int runs_ = 0;
};

class FaultyKernel final : public AttentionImpl {
 public:
  FaultyKernel(const AttentionImpl& inner, Fault f, std::string name, std::string description)
      : inner_(inner), fault_(f) {
    info_ = inner.info();
    info_.name = std::move(name);
    info_.description = std::move(description);
    info_.role = KernelRole::optimized;  // an implementation under test, never an oracle
    if (f == Fault::bf16_only) info_.caps.cache_formats = {CacheFormat::bf16};
  }
  const KernelInfo& info() const override { return info_; }
  std::optional<std::string> unavailable() const override { return inner_.unavailable(); }
  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    if (auto why = check(in.shape)) throw UnsupportedError(fmt::format("{}: {}", info_.name, *why));
    if (fault_ == Fault::dropped_last) {
      validate_attention_inputs(in, info_.name);
      // The oracle copies what it is given in prepare(), so the altered inputs may go.
      return inner_.prepare(without_last_token(in).view());
    }
    return std::make_unique<FaultyPrepared>(inner_.prepare(in), fault_, in.shape.heads);
  }

 private:
  const AttentionImpl& inner_;
  Fault fault_;
  KernelInfo info_;
};

}  // namespace

const std::vector<std::string>& names() {
  static const std::vector<std::string> n{"dropped_last", "throws", "leaky", "bf16_only", "untuned_heads"};
  return n;
}

std::unique_ptr<AttentionImpl> make(const std::string& name) {
  struct Spec {
    Fault fault;
    const char* kernel;
    const char* description;
  };
  Spec spec;
  if (name == "dropped_last") {
    spec = {Fault::dropped_last, "cpu_mla_fp64_dropped_last_token",
            "PERTURBED: cpu_mla_fp64 that never attends the last cache token"};
  } else if (name == "throws") {
    spec = {Fault::throws, "selftest_throws", "cpu_mla_fp64 whose run() throws (certifier self-test)"};
  } else if (name == "leaky") {
    spec = {Fault::leaky, "selftest_leaky", "cpu_mla_fp64 whose second run returns a NaN (certifier self-test)"};
  } else if (name == "bf16_only") {
    spec = {Fault::bf16_only, "selftest_bf16_only", "cpu_mla_fp64 claiming the bf16 cache only (certifier self-test)"};
  } else if (name == "untuned_heads") {
    spec = {Fault::untuned_heads, "selftest_untuned_heads",
            "cpu_mla_fp64 whose last head stays zero for 17 to 47 heads, head counts the catalog lacks (certifier "
            "self-test)"};
  } else {
    throw Error(fmt::format("unknown fault kernel '{}' (known: {})", name, fmt::join(names(), ", ")));
  }
  register_builtin_kernels();
  const AttentionImpl* base = Registry::instance().find("cpu_mla_fp64");
  if (!base) throw Error("the fault kernels wrap cpu_mla_fp64, which is not registered");
  return std::make_unique<FaultyKernel>(*base, spec.fault, spec.kernel, spec.description);
}

}  // namespace mla::faults
