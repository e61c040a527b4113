// The precision class of an attention implementation: what its products read (operands: q, the
// k/v tiles, P), what it accumulates in, and what it writes. A kernel is judged by the class it
// declares, not by its output dtype alone: a kernel that dequantizes an FP8 cache into bf16
// tiles and writes float32 (FlashMLA's reference does, docs/field.md, "The peers' conventions",
// FP8 dequantization) carries bf16 operand rounding that no float32 bound allows, and is no
// worse for it.
//
// The dtype words are OutDType's ("f64", "f32", "bf16"): one spelling of a dtype in the suite.
// A class is written "operands/accumulate/output", e.g. "bf16/f32/f32".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mla/core/attention.hpp"

namespace mla {

struct PrecisionClass {
  OutDType operands = OutDType::f64;
  OutDType accumulate = OutDType::f64;
  OutDType output = OutDType::f64;
  bool operator==(const PrecisionClass&) const = default;
};

// What an implementation declares besides its output dtype (which KernelInfo::out_dtype holds
// once): operands and accumulation.
struct ComputePrecision {
  OutDType operands = OutDType::f64;
  OutDType accumulate = OutDType::f64;
  bool operator==(const ComputePrecision&) const = default;
};

// The class an implementation that declares nothing is held to (every plug-in before ABI 1.2,
// every kernel that predates classes): the one its output dtype implies, which is the rule the
// tolerance table applied by output dtype alone — f64: f64/f64/f64, f32: f32/f32/f32, bf16:
// bf16/f32/bf16 (fp32 softmax and accumulation, bf16 tiles: the deployed kernels').
PrecisionClass implied_precision(OutDType output);
// The class of `declared` (nullopt: undeclared) with `output`.
PrecisionClass precision_class(const std::optional<ComputePrecision>& declared, OutDType output);

// "bf16/f32/f32"; the parser throws mla::Error naming the malformed part.
std::string to_string(const PrecisionClass& c);
PrecisionClass precision_class_from_string(std::string_view s);

// Why the suite cannot judge this class (no tolerance entry can be derived for it), or nullopt.
// Judged: accumulation in f32 or f64 (bf16 accumulation is a defect, not a class); output f64
// only from f64 operands and accumulation (the oracles); anything else with f32 or bf16 output.
std::optional<std::string> unjudgeable(const PrecisionClass& c);

// {"operands", "accumulate", "output", "declared"}: how the certificate records a class.
nlohmann::json to_json(const PrecisionClass& c, bool declared);

}  // namespace mla
