// What an implementation of the prefill kind is (mla/core/prefill.hpp is its vocabulary): what it
// claims, its role in the chain of oracles, its precision class, the conventions it declares, its
// byte and FLOP model, and the prepare/run split the certifier and the benchmarks drive — the
// decode kind's AttentionImpl (mla/core/kernel.hpp), for the MHA-form prefill.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mla/core/kernel.hpp"
#include "mla/core/precision.hpp"
#include "mla/core/prefill.hpp"

namespace mla {

// What a prefill implementation claims. Anything outside is refused with a reason by
// PrefillImpl::check, never routed elsewhere.
struct PrefillCapabilities {
  int min_heads = 1, max_heads = 128;
  bool causal = true;      // the bottom-right causal call (or top-left, as its conventions say)
  bool non_causal = true;  // the context-chunk call
  bool varlen = true;      // sequences of different lengths in one batch
  int64_t max_total_tokens = int64_t{1} << 20;  // total_q and total_k each
};
// Why `shape` (with the batch's cu_seqlens, for varlen) is outside `caps`, or nullopt.
std::optional<std::string> check_prefill_capabilities(const PrefillCapabilities& caps, const PrefillInputs& in);
nlohmann::json to_json(const PrefillCapabilities& c);
PrefillCapabilities prefill_capabilities_from_json(const nlohmann::json& j);  // throws mla::Error

struct PrefillKernelInfo {
  std::string name;         // unique, [a-z0-9_]+
  std::string backend;      // "cpu" or "cuda"
  std::string description;  // one line
  KernelRole role = KernelRole::optimized;
  OutDType out_dtype = OutDType::f64;
  std::optional<ComputePrecision> compute;  // nullopt: the class out_dtype implies
  PrefillCapabilities caps;
  PrefillConventions conventions;
};
PrecisionClass precision_class(const PrefillKernelInfo& k);

class PreparedPrefill {
 public:
  virtual ~PreparedPrefill() = default;
  // The timed part; repeatable with identical results.
  virtual void run() = 0;
  // The results of the last run, in the kernel's declared conventions (the host makes them
  // canonical: outputs_to_canonical in mla/core/prefill.hpp).
  virtual PrefillOutputs results() = 0;
  virtual void synchronize() {}
};

class PrefillImpl {
 public:
  virtual ~PrefillImpl() = default;
  virtual const PrefillKernelInfo& info() const = 0;
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Why it cannot run these inputs (their shape and lengths), or nullopt. Default: the
  // capabilities and the conventions' causal alignment.
  virtual std::optional<std::string> check(const PrefillInputs& in) const;
  // Default: prefill_cost_model with the implementation's output dtype.
  virtual CostModel cost(const PrefillInputs& in) const;
  // `in` in the kernel's conventions (V padded when it declares so); validates and copies.
  virtual std::unique_ptr<PreparedPrefill> prepare(const PrefillInputs& in) const = 0;
};

}  // namespace mla
