// The merge contract: two partial attention states over disjoint key sets joined into one, the
// step that folds a prefill's context chunks and joins them with the new tokens' part
// (docs/field.md, "Prefill in the MHA form"): vLLM's merge_attn_states, FlashInfer's merge_state.
//
//   lse = log(e^lse_a + e^lse_b),  out = e^(lse_a - lse)·out_a + e^(lse_b - lse)·out_b
//
// Canonical (the merge goldens, mla::ref::merge_states, the judge): out [n, h, d] in the state
// dtype (the partial outs' and the merged out's), lse [h, n] float32, natural log. Any infinite
// input lse (+inf as FA2 writes an empty row, -inf as FA3 and FlashInfer do) means that side
// attended nothing: its weight is 0 and its out is never read (it may hold anything, NaN
// included). Both sides empty: out 0 and lse -inf (log 0), never NaN. A kernel declares what
// differs (MergeConventions) and the host converts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/conventions.hpp"
#include "mla/core/kernel.hpp"

namespace mla {

// The element type of the partial and merged outs (the merge goldens' bfloat16, float16, float32).
enum class StateDType { bf16, f16, f32 };
const char* to_string(StateDType d);                 // "bf16" | "f16" | "f32"
StateDType state_dtype_from_string(std::string_view s);  // also the schema's "bfloat16", "float16", "float32"
std::size_t bytes_per_value(StateDType d);           // 2, 2, 4
// Element i of raw little-endian values of type d, exactly; NaN stays NaN.
double state_value(StateDType d, std::span<const uint8_t> raw, std::size_t i);
// x rounded to d (round to nearest even), as its bytes appended to `raw`.
void append_state_value(StateDType d, double x, std::vector<uint8_t>& raw);

struct MergeShape {
  int64_t tokens = 0;  // n: query rows
  int heads = 0;
  int head_dim = 0;    // d: 128 (a prefill's V) or 512 (MLA's latent V)
  StateDType dtype = StateDType::bf16;
};
std::vector<int64_t> out_shape(const MergeShape& s);  // [n, h, d]
std::vector<int64_t> lse_shape(const MergeShape& s);  // [h, n]

struct MergeInputs {
  MergeShape shape;
  std::span<const uint8_t> out_a, out_b;  // [n, h, d] values of shape.dtype, raw bytes
  std::span<const float> lse_a, lse_b;    // [h, n]
};
struct MergeBuffers {
  MergeShape shape;
  std::vector<uint8_t> out_a, out_b;
  std::vector<float> lse_a, lse_b;
  MergeBuffers() = default;
  explicit MergeBuffers(const MergeInputs& in);
  MergeInputs view() const;
};
// Results widened to double for judging: out [n, h, d] values of `dtype`, lse [h, n] canonical.
struct MergeOutputs {
  StateDType dtype = StateDType::f32;
  std::vector<double> out, lse;
};

// What a merge kernel declares: lse base (FlashInfer's merge_state takes and writes base 2),
// layout ([h, n] as vLLM's, [n, h] as FlashInfer's), and the lse it writes when both sides are
// empty (-inf canonically; pos_inf: +inf). Inputs are converted to its base and layout (an empty
// side stays infinite); its outputs back.
struct MergeConventions {
  LseBase lse_base = LseBase::e;
  LseLayout lse_layout = LseLayout::b_h_sq;              // [h, n]; b_sq_h: [n, h]
  EmptyRowLse both_empty_lse = EmptyRowLse::neg_inf;
  bool operator==(const MergeConventions&) const = default;
};
nlohmann::json to_json(const MergeConventions& c);
MergeConventions merge_conventions_from_json(const nlohmann::json& j);  // throws mla::Error naming the field
// The input lse as the kernel takes it (canonical [h, n] natural log -> its base and layout);
// nullopt when its conventions are canonical.
std::optional<std::vector<float>> merge_lse_to_kernel(const MergeConventions& c, const MergeShape& s,
                                                      std::span<const float> lse);
// The canonical inputs as a kernel with conventions `c` takes them (both lse arrays converted into
// the two storages, which the returned view then points into): the one boundary every host crosses.
MergeInputs inputs_to_kernel(const MergeConventions& c, const MergeInputs& in, std::vector<float>& lse_a_storage,
                             std::vector<float>& lse_b_storage);
// The kernel's outputs made canonical in place (lse only; a wrong size is left for the judge).
void outputs_to_canonical(const MergeConventions& c, const MergeShape& s, MergeOutputs& o);

// heads and head_dim >= 1, tokens >= 0, a known dtype, every span its shape's size, no NaN lse
// (an infinite one is an empty side), and a NaN out value only on a side whose lse is infinite.
// Throws mla::Error naming the field and the position, prefixed with `who`.
void validate_merge_inputs(const MergeInputs& in, std::string_view who = {});

// Memory-bound: bytes = both partial outs read and the merged out written (n·h·d values of the
// dtype each), three lse arrays (4 bytes a value); FLOPs 3·n·h·d (two products and a sum per value).
CostModel merge_cost_model(const MergeShape& s);

struct MergeKernelInfo {
  std::string name, backend, description;
  KernelRole role = KernelRole::optimized;
  std::vector<StateDType> dtypes;  // the state dtypes it merges
  std::vector<int> head_dims;      // empty: any
  MergeConventions conventions;
};

class PreparedMerge {
 public:
  virtual ~PreparedMerge() = default;
  virtual void run() = 0;                  // timed; repeatable
  virtual MergeOutputs results() = 0;      // in its declared conventions
  virtual void synchronize() {}
};

class MergeImpl {
 public:
  virtual ~MergeImpl() = default;
  virtual const MergeKernelInfo& info() const = 0;
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Default: the dtype and head_dim against its claims.
  virtual std::optional<std::string> check(const MergeShape& s) const;
  virtual CostModel cost(const MergeShape& s) const { return merge_cost_model(s); }
  // `in` with its lse in the kernel's conventions; validates and copies.
  virtual std::unique_ptr<PreparedMerge> prepare(const MergeInputs& in) const = 0;
};

}  // namespace mla
