#include "mla/core/precision.hpp"

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

PrecisionClass implied_precision(OutDType output) {
  switch (output) {
    case OutDType::f64: return {OutDType::f64, OutDType::f64, OutDType::f64};
    case OutDType::f32: return {OutDType::f32, OutDType::f32, OutDType::f32};
    case OutDType::bf16: return {OutDType::bf16, OutDType::f32, OutDType::bf16};
  }
  throw Error(fmt::format("implied_precision: unknown output dtype {}", static_cast<int>(output)));
}

PrecisionClass precision_class(const std::optional<ComputePrecision>& declared, OutDType output) {
  if (!declared) return implied_precision(output);
  return {declared->operands, declared->accumulate, output};
}

std::string to_string(const PrecisionClass& c) {
  return fmt::format("{}/{}/{}", to_string(c.operands), to_string(c.accumulate), to_string(c.output));
}

PrecisionClass precision_class_from_string(std::string_view s) {
  const auto a = s.find('/');
  const auto b = a == std::string_view::npos ? a : s.find('/', a + 1);
  if (b == std::string_view::npos || s.find('/', b + 1) != std::string_view::npos) {
    throw Error(fmt::format("precision class '{}' is not operands/accumulate/output (e.g. bf16/f32/f32)", s));
  }
  return {out_dtype_from_string(s.substr(0, a)), out_dtype_from_string(s.substr(a + 1, b - a - 1)),
          out_dtype_from_string(s.substr(b + 1))};
}

std::optional<std::string> unjudgeable(const PrecisionClass& c) {
  if (c.accumulate == OutDType::bf16) {
    return fmt::format("{}: accumulating in bf16 loses the sum itself (docs/field.md, \"Bugs\", 7); the suite "
                       "judges f32 or f64 accumulation",
                       to_string(c));
  }
  if (c.output == OutDType::f64 && (c.operands != OutDType::f64 || c.accumulate != OutDType::f64)) {
    return fmt::format("{}: an f64 output is judged at fp64 roundoff, which only f64 operands and accumulation "
                       "reach",
                       to_string(c));
  }
  return std::nullopt;
}

nlohmann::json to_json(const PrecisionClass& c, bool declared) {
  return {{"operands", to_string(c.operands)},
          {"accumulate", to_string(c.accumulate)},
          {"output", to_string(c.output)},
          {"declared", declared}};
}

}  // namespace mla
