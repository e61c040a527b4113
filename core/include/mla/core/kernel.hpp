// What an implementation of the attention core is (CPU or CUDA, ours or a plug-in): what it
// claims, its role in the chain of oracles, its byte and FLOP model, and the prepare/run split
// the certifier and the benchmarks drive. The vocabulary it speaks is mla/core/attention.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/attention.hpp"
#include "mla/core/conventions.hpp"
#include "mla/core/precision.hpp"

namespace mla {

// What an implementation claims to support. Anything outside is refused with a reason by
// `AttentionImpl::check`, never silently routed elsewhere (docs/field.md, "Bugs", 9).
struct Capabilities {
  std::vector<CacheFormat> cache_formats;
  int min_heads = 1, max_heads = 128;
  int min_s_q = 1, max_s_q = 64;
  std::vector<int> page_sizes;  // empty: any page size
  bool dense = true;
  bool sparse = false;
  bool varlen = true;
};

// Capability check shared by the default `check` and by callers that want the reason.
std::optional<std::string> check_capabilities(const Capabilities& caps, const AttnShape& shape);
// Capabilities carry `varlen`, which a shape alone cannot show: it needs the lengths.
std::optional<std::string> check_varlen(const Capabilities& caps, std::span<const int32_t> cache_seqlens);
// As the certificate and the plug-in description record them; from_json throws mla::Error.
nlohmann::json to_json(const Capabilities& c);
Capabilities capabilities_from_json(const nlohmann::json& j);

// Where an implementation stands in the chain of oracles (README, "The chain of oracles"):
//   oracle     computes the truth itself (held to it at fp64 roundoff);
//   baseline   an independent, deliberately plain formulation, the one optimized kernels are
//              measured against (reports compute speed-ups over the baselines);
//   optimized  a kernel meant for production: ours, or a plug-in's.
enum class KernelRole { oracle, baseline, optimized };
const char* to_string(KernelRole r);
KernelRole kernel_role_from_string(std::string_view s);

struct KernelInfo {
  std::string name;         // unique, [a-z0-9_]+
  std::string backend;      // "cpu" or "cuda"
  std::string description;  // one line
  KernelRole role = KernelRole::optimized;
  OutDType out_dtype = OutDType::f64;
  Capabilities caps;
  // Its precision class besides the output (mla/core/precision.hpp): what its products read and
  // what it accumulates in. nullopt: undeclared, held to the class out_dtype implies.
  std::optional<ComputePrecision> compute;
  // How its lse and sparse indices are written (mla/core/conventions.hpp); the host converts.
  Conventions conventions;
};

// {operands, accumulate, out_dtype}: the class the judge picks the tolerance by.
PrecisionClass precision_class(const KernelInfo& k);

// Byte and FLOP model of one call, used by benchmarks and reports.
struct CostModel {
  double bytes = 0;  // q + cache bytes actually read + out + lse
  double flops = 0;  // 2 * attended (query, key) pairs * h * (576 + 512)
};

class PreparedAttention {
 public:
  virtual ~PreparedAttention() = default;
  // The timed part: compute from the prepared inputs. Must be repeatable with identical results.
  virtual void run() = 0;
  // Copies the results of the last run back (untimed).
  virtual AttnOutputs results() = 0;
  // Blocks until the work issued by run() has finished (CPU: no-op).
  virtual void synchronize() {}
};

// A prepared call whose work runs where this process cannot clock it alone: a Python kernel runs
// in the door's child, so a clock here would add the round trip to the child; there the child
// brackets the call itself (CUDA events around a device kernel's stream work, a host clock around
// a CPU one). A benchmark takes that figure as the call's time and measures the path apart (the
// same path with an empty kernel).
class SelfTimed {
 public:
  virtual ~SelfTimed() = default;
  // Seconds of the last run() as measured where it ran; nullopt: none, time it from outside.
  virtual std::optional<double> last_run_seconds() const = 0;
};

class AttentionImpl {
 public:
  virtual ~AttentionImpl() = default;
  virtual const KernelInfo& info() const = 0;
  // Why it cannot run on this machine at all (no GPU, ...), or nullopt.
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Why it cannot run this shape, or nullopt. Default: checks `info().caps`.
  virtual std::optional<std::string> check(const AttnShape& shape) const;
  // The bytes/FLOPs this call moves; default is the MLA model (latent cache read once).
  virtual CostModel cost(const AttnInputs& in) const;
  // Validates and copies inputs; throws mla::Error on a shape it does not support.
  virtual std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const = 0;
};

// The MLA byte/FLOP model (fixtures/SCHEMA.md; docs/field.md, "Byte and FLOP model of a decode
// call"), with bf16 outputs (what deployed kernels write).
CostModel mla_cost_model(const AttnInputs& in);
// The same with outputs of `out_dtype` (AttentionImpl::cost uses the implementation's own).
CostModel mla_cost_model(const AttnInputs& in, OutDType out_dtype);

// What a call must touch, the basis of both models. tokens: cache tokens read (dense: the
// tokens some query attends; sparse: the distinct valid indices of each sequence); pairs:
// attended (query, key) pairs, causal-aware. Throws mla::Error when the spans are too short.
struct AttnTraffic {
  int64_t tokens = 0;
  int64_t pairs = 0;
  std::vector<int64_t> per_sequence_tokens;
};
AttnTraffic attention_traffic(const AttnInputs& in);

}  // namespace mla
