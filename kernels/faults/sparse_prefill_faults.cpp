// The sparse prefill bugs (faults.hpp): cpu_sparse_prefill_f32 with one bug of the field each,
// made by changing what the correct kernel is given (the indices, the topk_length) or what it
// returns (the lse), so each departs from a correct kernel in exactly one place.
#include <cmath>
#include <algorithm>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/faults/faults.hpp"
#include "mla/registry/registry.hpp"

namespace mla::faults {
namespace {

enum class Fault { minus_one_as_zero, lse_log2, sink_in_lse, ignores_topk_length };

struct Spec {
  Fault fault;
  const char* name;
  const char* description;
};

const std::vector<Spec>& specs() {
  static const std::vector<Spec> s{
      {Fault::minus_one_as_zero, "sparse_minus_one_as_zero", "reads a -1 index as position 0 (an unmasked gather)"},
      {Fault::lse_log2, "sparse_lse_log2", "writes lse in base 2 (FlashInfer's), undeclared"},
      {Fault::sink_in_lse, "sparse_sink_in_lse", "adds the attention sink's mass to lse (lse of keys and sink)"},
      {Fault::ignores_topk_length, "sparse_ignores_topk_length", "reads every index entry, past a row's topk_length too"}};
  return s;
}

const SparsePrefillImpl& correct() {
  register_builtin_kernels();
  const auto* k = Registry::instance().find_sparse_prefill("cpu_sparse_prefill_f32");
  if (!k) throw Error("the sparse prefill fault kernels wrap cpu_sparse_prefill_f32, which is not registered");
  return *k;
}

class Prepared final : public PreparedSparsePrefill {
 public:
  Prepared(Fault f, SparsePrefillBuffers in) : fault_(f), in_(std::move(in)) { inner_ = correct().prepare(in_.view()); }
  void run() override { inner_->run(); }
  SparsePrefillOutputs results() override {
    auto r = inner_->results();
    const auto& s = in_.shape;
    for (int64_t i = 0; i < s.s_q; ++i) {
      for (int h = 0; h < s.heads; ++h) {
        double& l = r.lse[static_cast<std::size_t>(i * s.heads + h)];
        if (!std::isfinite(l)) continue;
        if (fault_ == Fault::lse_log2) l /= std::log(2.0);
        if (fault_ == Fault::sink_in_lse && s.sink) {
          l = std::log(std::exp(l) + std::exp(static_cast<double>(in_.attn_sink[static_cast<std::size_t>(h)])));
        }
      }
    }
    return r;
  }

 private:
  Fault fault_;
  SparsePrefillBuffers in_;
  std::unique_ptr<PreparedSparsePrefill> inner_;
};

class Faulty final : public SparsePrefillImpl {
 public:
  Faulty(const Spec& s) : fault_(s.fault) {
    info_ = correct().info();
    info_.name = fmt::format("cpu_sparse_prefill_{}", std::string(s.name).substr(7));  // past "sparse_"
    info_.description = fmt::format("cpu_sparse_prefill_f32 that {}", s.description);
  }
  const SparsePrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedSparsePrefill> prepare(const SparsePrefillInputs& in) const override {
    validate_sparse_prefill_inputs(in, info_.name);
    SparsePrefillBuffers b(in);
    if (fault_ == Fault::minus_one_as_zero && b.shape.s_kv > 0) {
      for (auto& x : b.indices) x = x == -1 ? 0 : x;
      // A row that names 0 and -1 would list 0 twice, which the contract refuses: the bug's
      // second 0 is dropped, as a gather that writes one slot twice would hold it once.
      for (int64_t i = 0; i < b.shape.s_q; ++i) {
        bool seen = false;
        for (int64_t j = 0; j < b.shape.topk; ++j) {
          auto& x = b.indices[static_cast<std::size_t>(i * b.shape.topk + j)];
          if (x == 0 && (!b.shape.topk_length || j < b.topk_length[static_cast<std::size_t>(i)])) {
            if (seen) x = -1;
            seen = true;
          }
        }
      }
    }
    if (fault_ == Fault::ignores_topk_length && b.shape.topk_length) {
      b.shape.topk_length = false;
      b.topk_length.clear();
      // Entries past a row's length may repeat a position before it: the bug attends each once.
      for (int64_t i = 0; i < b.shape.s_q; ++i) {
        std::vector<int32_t> seen;
        for (int64_t j = 0; j < b.shape.topk; ++j) {
          auto& x = b.indices[static_cast<std::size_t>(i * b.shape.topk + j)];
          if (x < 0 || x >= b.shape.s_kv) continue;
          if (std::find(seen.begin(), seen.end(), x) != seen.end()) x = -1;
          else seen.push_back(x);
        }
      }
    }
    return std::make_unique<Prepared>(fault_, std::move(b));
  }

 private:
  Fault fault_;
  SparsePrefillKernelInfo info_;
};

}  // namespace

const std::vector<std::string>& sparse_prefill_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : specs()) n.emplace_back(s.name);
    return n;
  }();
  return names;
}

std::unique_ptr<SparsePrefillImpl> make_sparse_prefill(const std::string& name) {
  for (const auto& s : specs()) {
    if (name == s.name) return std::make_unique<Faulty>(s);
  }
  throw Error(fmt::format("unknown sparse prefill fault kernel '{}' (known: {})", name, fmt::join(sparse_prefill_names(), ", ")));
}

}  // namespace mla::faults
