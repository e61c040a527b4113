// The top-k contract: the selection step between V3.2's lightning indexer and its sparse
// attention (the reference's mla_ref/indexer.py, topk): each row of float32 logits -> the
// positions of its k largest valid logits, which the sparse attention then reads.
//
// Inputs: logits [rows, n] float32 row-major; per row a valid range [start, end) (DeepGEMM's
// ks/ke: a row of a prefill sees only its sequence's keys up to itself); k. A position is valid
// when it lies in its row's range and its logit is finite: -inf marks a masked position (the
// causal mask, a padded key). A row with end <= start has nothing valid. Outside the range the
// logits are never read and may hold anything (DeepGEMM leaves them unwritten unless asked to
// clean them), NaN included.
//
// Output: int32 indices [rows, k]: min(k, valid positions of the row) distinct valid positions,
// then -1 padding up to k. Canonical (the judge, the oracle): absolute numbering (the column of
// the logits row), the -1 padding trailing. What a kernel declares (TopkConventions) and the host
// converts: index base (relative to the row's start, as vLLM's radix top-k writes them, or
// absolute) and whether it orders its selection by descending logit (the judge never requires an
// order of a kernel that does not declare one, and holds one that does to it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/kernel.hpp"

namespace mla {

struct TopkShape {
  int64_t rows = 0;  // query rows (tokens of a step, or of a prefill)
  int64_t n = 0;     // logits per row (the key positions of the widest row)
  int k = 0;         // indices per row; may exceed n (the rest is padding)
};
std::vector<int64_t> logits_shape(const TopkShape& s);   // [rows, n]
std::vector<int64_t> indices_shape(const TopkShape& s);  // [rows, k]

struct TopkInputs {
  TopkShape shape;
  std::span<const float> logits;          // [rows, n]
  std::span<const int32_t> starts, ends;  // [rows] each: the valid range [start, end)
};
struct TopkBuffers {
  TopkShape shape;
  std::vector<float> logits;
  std::vector<int32_t> starts, ends;
  TopkBuffers() = default;
  explicit TopkBuffers(const TopkInputs& in);
  TopkInputs view() const;
};
// A kernel's indices [rows, k], widened so that a relative index plus its row's start cannot
// overflow while it is made canonical.
struct TopkOutputs {
  std::vector<int64_t> indices;
};

// Relative: index i of a row means column start + i (vLLM's per-row radix top-k); absolute: the
// column itself. -1 is padding in both.
enum class IndexBase { relative, absolute };
const char* to_string(IndexBase b);                  // "relative" | "absolute"
IndexBase index_base_from_string(std::string_view s);

// The precision the kernel compares logits in, which sets the judge's tolerance for near-ties
// (tolerance table, topk.dominance.*): f32, the given float32 values through at most a couple of
// float32 roundings of a monotone transform (subtracting the row's max, a scale); bf16, the
// logits rounded to bfloat16 before they are compared (a 16-bit radix pass with no refinement).
enum class LogitsPrecision { f32, bf16 };
const char* to_string(LogitsPrecision p);            // "f32" | "bf16"
LogitsPrecision logits_precision_from_string(std::string_view s);

struct TopkConventions {
  IndexBase index_base = IndexBase::absolute;
  bool sorted = false;  // true: the selected indices come by descending logit
  bool operator==(const TopkConventions&) const = default;
};
nlohmann::json to_json(const TopkConventions& c);
TopkConventions topk_conventions_from_json(const nlohmann::json& j);  // throws mla::Error naming the field

// The kernel's indices made canonical (absolute) in place: i >= 0 of row r becomes start_r + i
// for a relative kernel. -1 and every other negative value are left as they are, so that a bad
// index (-2, a relative index that would land on a valid column only by the shift) is never
// turned into a good one; a wrong size is left for the judge.
void topk_outputs_to_canonical(const TopkConventions& c, const TopkInputs& in, TopkOutputs& o);

// rows >= 0, n in [0, 2^31 - 1] (int32 indices), k >= 1; logits of rows·n values, starts and ends
// of rows values each, 0 <= start <= n and 0 <= end <= n on every row; no NaN and no +inf inside
// a row's range (-inf is a masked position). Throws mla::Error naming the field and the row,
// prefixed with `who`.
void validate_topk_inputs(const TopkInputs& in, std::string_view who = {});

// Memory-bound: bytes = every row's range of logits read (4 bytes a value), starts and ends
// (8 bytes a row), the indices written (4 bytes each). No arithmetic: flops 0 (a top-k is
// measured in logits per second).
CostModel topk_cost_model(const TopkInputs& in);

struct TopkKernelInfo {
  std::string name, backend, description;
  KernelRole role = KernelRole::optimized;
  LogitsPrecision precision = LogitsPrecision::f32;
  std::vector<int> ks;        // the k it supports; empty: any
  int64_t max_n = 0;          // the longest row it takes; 0: any
  // True: it claims only rows whose every position in [start, end) is finite (the range is the
  // causal horizon, as V3.2's sparse attention calls it), and is given no masked (-inf) position
  // inside a range; false (the canonical): masked positions in range, never to be selected.
  bool range_all_valid = false;
  TopkConventions conventions;
};

class PreparedTopk {
 public:
  virtual ~PreparedTopk() = default;
  virtual void run() = 0;               // timed; repeatable
  virtual TopkOutputs results() = 0;    // in its declared conventions
  virtual void synchronize() {}
};

class TopkImpl {
 public:
  virtual ~TopkImpl() = default;
  virtual const TopkKernelInfo& info() const = 0;
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Default: k and n against its claims.
  virtual std::optional<std::string> check(const TopkShape& s) const;
  virtual CostModel cost(const TopkInputs& in) const { return topk_cost_model(in); }
  // Validates and copies.
  virtual std::unique_ptr<PreparedTopk> prepare(const TopkInputs& in) const = 0;
};

}  // namespace mla
