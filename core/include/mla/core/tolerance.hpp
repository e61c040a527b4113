// The tolerance engine. Every judgement in the suite goes through `judge`, with a tolerance
// looked up by name from the one table in core/src/tolerance_table.cpp (no literal tolerance
// anywhere else).
//
// The contract per comparison (FlashMLA's and FlashAttention's methods, docs/field.md,
// "Tolerance methods in use", combined against an fp64 truth that neither of them has):
//  1. equal shapes; 2. equal NaN / +Inf / -Inf masks;
//  3. every finite element within atol OR rtol of the truth (the worst one is reported with its
//     multi-index, so a rare mismatch cannot hide behind a good global score); atol may scale
//     with the tensor's largest magnitude (`atol_rel_max`);
//  4. global cosine difference 1 - 2Σxy/Σ(x²+y²), in fp64, within `cos_diff`;
//  5. error ratio: max|impl - truth| <= k * max|same_dtype - truth| + floor, where same_dtype is
//     the deployed-precision reference (skipped when no such reference is given, e.g. fp64 impls).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/attention.hpp"
#include "mla/core/precision.hpp"

namespace mla::tol {

struct Tolerance {
  std::string name;
  std::string why;        // one line: where the numbers come from
  double atol = 0;
  double rtol = 0;
  double cos_diff = 0;    // max allowed 1 - 2Σxy/Σ(x²+y²)
  double ratio_k = 0;     // 0 disables the error-ratio rule
  double ratio_floor = 0; // absolute rounding floor added to k * same-dtype error
  double min_pass_fraction = 1.0;  // fraction of elements that must satisfy atol-or-rtol
  // A floor proportional to the data: the error-ratio bound is
  //   k * same_dtype_err + ratio_floor + ratio_floor_rel * max|truth|
  // because one rounding of the output (FlashAttention's floor) scales with its magnitude.
  double ratio_floor_rel = 0;
  // The element rule's absolute bound grows with the tensor's magnitude:
  //   atol_used = max(atol, atol_rel_max * max|truth|).
  // Why: in P·V every element accumulates terms as large as the largest values, so a near-zero
  // output inherits rounding errors of that size; a fixed atol tuned on O(1) data (FlashMLA's)
  // fails a correct kernel on data of magnitude 1e3 (the FP8 edge blocks) and is meaningless on
  // data of magnitude 1e-3.
  double atol_rel_max = 0;
};

// max(t.atol, t.atol_rel_max * max_abs_truth): the element rule's absolute bound for a tensor.
double effective_atol(const Tolerance& t, double max_abs_truth);

// Throws mla::Error naming the unknown tolerance.
const Tolerance& lookup(std::string_view name);
const std::vector<Tolerance>& table();

// The table entry for an attention-core result of an implementation of precision class `c`
// (mla/core/precision.hpp): `what` is "out" or "lse"; the cache format matters for bf16 operands
// (an FP8 cache adds its dequantization into bf16). Throws mla::Error on another `what` and on a
// class the suite cannot judge (precision.hpp, unjudgeable). The classes and their entries:
//   f64/f64/f64                        attn.*.f64
//   f32 or f64 operands, f32 output    attn.*.f32
//   bf16 operands, f32 output          attn.out.bf16_operands_f32 (bf16 cache),
//                                      attn.out.fp8_bf16_operands_f32 (FP8 cache);
//                                      lse: attn.lse.bf16 / attn.lse.fp8 (it is fp32 in both)
//   any operands, bf16 output          attn.*.bf16 (bf16 cache), attn.*.fp8 (FP8 cache)
// with f32 or f64 accumulation.
const Tolerance& tolerance_for(const PrecisionClass& c, CacheFormat format, std::string_view what);
// The same for an implementation that declares nothing: the class its output dtype implies.
const Tolerance& tolerance_for(OutDType dtype, CacheFormat format, std::string_view what);
// The table entry for a prefill result (mla/core/prefill.hpp) of class `c`, by the same classes:
// prefill.*.f64, prefill.*.f32, prefill.out.bf16_operands_f32 (lse: prefill.lse.bf16),
// prefill.*.bf16. Throws as tolerance_for.
const Tolerance& prefill_tolerance_for(const PrecisionClass& c, std::string_view what);
nlohmann::json to_json(const Tolerance& t);

// The verdict of one (implementation, case); README "Reading a report" says what each means for
// a user. Only FAIL and ERROR count against an implementation.
//   pass         judged, and inside every bound
//   fail         judged, and outside some bound (every failed rule named), or the call broke
//                its contract (inputs changed, writes past an output, calls that differ), or it
//                refused a shape it claims (the certificate's cause broken_claim)
//   unsupported  refused when called without counting against it: an informational run of an
//                unclaimed shape, or a plug-in's append refusing a format it claims
//   error        it threw, crashed or hung, or the case itself could not be used (a golden that
//                lies about its shape)
//   skipped      not run: the implementation cannot run on this machine, or a size filter
//   not_claimed  outside what the implementation declares it handles; never run for a verdict
//   host_error   the machine failed, not the implementation (a file-size limit, a full disk, no
//                file descriptors, a fork or memory failure of the certifier): never blamed,
//                never a pass, run again by --resume
enum class Verdict { pass, fail, unsupported, error, skipped, not_claimed, host_error };
const char* to_string(Verdict v);
// Inverse of to_string; throws mla::Error on an unknown word.
Verdict verdict_from_string(std::string_view s);

struct Comparison {
  std::string what;  // "out", "lse", ...
  std::string tolerance;
  Verdict verdict = Verdict::fail;
  std::vector<std::string> reasons;  // every failed rule, human readable
  int64_t numel = 0;
  double max_abs_err = 0;
  std::vector<int64_t> max_abs_index;
  double max_rel_err = 0;
  std::vector<int64_t> max_rel_index;
  double p50_abs_err = 0, p99_abs_err = 0;
  double pass_fraction = 0;
  double cos_diff = 0;
  std::optional<double> same_dtype_max_abs_err;  // the reference's own error vs truth
  std::optional<double> error_ratio;             // max_abs_err / same_dtype_max_abs_err
  int64_t nan_mismatch = 0, inf_mismatch = 0;
  int64_t elements_failed = 0;                   // outside atol-or-rtol, or a mask mismatch
  // max over finite elements of |d| / max(atol_used, rtol·|truth|): below 1 every element passes,
  // and how far below says how much headroom the worst element has.
  double max_bound_use = 0;
  double max_abs_truth = 0;  // over finite truth elements
  double atol_used = 0;      // effective_atol(tolerance, max_abs_truth)
  std::optional<double> error_ratio_limit;       // k * same_dtype_max_abs_err + floor, when gated
};

// `impl`, `truth` (and `same_dtype` when given) have `shape` in C order. Never throws on bad
// numbers (they become a FAIL with reasons); throws mla::Error only on a size mismatch between
// a buffer and `shape`... which is reported as FAIL too when `impl` is the culprit.
Comparison judge(std::string what, std::span<const double> impl, std::span<const double> truth,
                 std::span<const int64_t> shape, const Tolerance& tol,
                 std::optional<std::span<const double>> same_dtype = std::nullopt);

// Non-finite metrics (an infinite relative error) are written as the strings "inf", "-inf",
// "nan", since JSON has no such numbers; comparison_from_json reads them back.
// A failed rule of `c` as a row's reason says it: "out: <rule>". One spelling, so a reader of the
// row can tell which of its reasons the comparison already holds (reports/src/render.cpp).
inline std::string row_reason(const Comparison& c, const std::string& why) { return c.what + ": " + why; }

nlohmann::json to_json(const Comparison& c);
Comparison comparison_from_json(const nlohmann::json& j);

// "[0,0,5,17]"
std::string format_index(std::span<const int64_t> index);

}  // namespace mla::tol
