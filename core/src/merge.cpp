#include "mla/core/merge.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

namespace mla {
namespace {

// The lse arrays of a merge are the decode lse of one sequence of n query rows: layouts and base
// conversions are conventions.hpp's, reused. The empty value is handled here (canonical -inf).
AttnShape as_decode_lse(const MergeShape& s) {
  AttnShape a;
  a.batch = 1;
  a.heads = s.heads;
  a.s_q = static_cast<int>(s.tokens);
  return a;
}

Conventions base_and_layout(const MergeConventions& c) {
  Conventions d;
  d.lse_base = c.lse_base;
  d.lse_layout = c.lse_layout;
  return d;  // empty_row_lse pos_inf: the decode conversion leaves infinities as they are
}

bool canonical(const MergeConventions& c) { return c == MergeConventions{}; }

}  // namespace

const char* to_string(StateDType d) {
  switch (d) {
    case StateDType::bf16: return "bf16";
    case StateDType::f16: return "f16";
    case StateDType::f32: return "f32";
  }
  return "unknown";
}

StateDType state_dtype_from_string(std::string_view s) {
  if (s == "bf16" || s == "bfloat16") return StateDType::bf16;
  if (s == "f16" || s == "float16" || s == "fp16") return StateDType::f16;
  if (s == "f32" || s == "float32" || s == "fp32") return StateDType::f32;
  throw Error(fmt::format("unknown state dtype '{}' (expected bf16, f16 or f32)", s));
}

std::size_t bytes_per_value(StateDType d) { return d == StateDType::f32 ? 4 : 2; }

double state_value(StateDType d, std::span<const uint8_t> raw, std::size_t i) {
  if (d == StateDType::f32) {
    float x;
    std::memcpy(&x, raw.data() + 4 * i, 4);
    return x;
  }
  uint16_t b;
  std::memcpy(&b, raw.data() + 2 * i, 2);
  return d == StateDType::bf16 ? static_cast<double>(bf16_to_float(b)) : f16_to_double(b);
}

void append_state_value(StateDType d, double x, std::vector<uint8_t>& raw) {
  const auto put = [&](const void* p, std::size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    raw.insert(raw.end(), c, c + n);
  };
  if (d == StateDType::f32) {
    const float f = static_cast<float>(x);
    put(&f, 4);
  } else if (d == StateDType::bf16) {
    const uint16_t b = bf16_from_double(x);
    put(&b, 2);
  } else {
    // Through float32 first, as a float32 kernel stores its fp16 output.
    const uint16_t h = f16_from_float(static_cast<float>(x));
    put(&h, 2);
  }
}

std::vector<int64_t> out_shape(const MergeShape& s) { return {s.tokens, s.heads, s.head_dim}; }
std::vector<int64_t> lse_shape(const MergeShape& s) { return {s.heads, s.tokens}; }

MergeBuffers::MergeBuffers(const MergeInputs& in)
    : shape(in.shape),
      out_a(in.out_a.begin(), in.out_a.end()),
      out_b(in.out_b.begin(), in.out_b.end()),
      lse_a(in.lse_a.begin(), in.lse_a.end()),
      lse_b(in.lse_b.begin(), in.lse_b.end()) {}

MergeInputs MergeBuffers::view() const { return MergeInputs{shape, out_a, out_b, lse_a, lse_b}; }

nlohmann::json to_json(const MergeConventions& c) {
  return {{"lse_base", to_string(c.lse_base)},
          {"lse_layout", c.lse_layout == LseLayout::b_h_sq ? "[h,n]" : "[n,h]"},
          {"both_empty_lse", to_string(c.both_empty_lse)}};
}

MergeConventions merge_conventions_from_json(const nlohmann::json& j) {
  MergeConventions c;
  std::string field = "merge conventions";
  try {
    field = "lse_base";
    c.lse_base = lse_base_from_string(j.at(field).get<std::string>());
    field = "lse_layout";
    const auto layout = j.at(field).get<std::string>();
    if (layout == "[h,n]") c.lse_layout = LseLayout::b_h_sq;
    else if (layout == "[n,h]") c.lse_layout = LseLayout::b_sq_h;
    else throw Error(fmt::format("unknown merge lse layout '{}' (expected [h,n] or [n,h])", layout));
    field = "both_empty_lse";
    c.both_empty_lse = empty_row_lse_from_string(j.at(field).get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("merge conventions: field '{}' is missing or malformed: {}", field, e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("merge conventions: field '{}': {}", field, e.what()));
  }
  return c;
}

std::optional<std::vector<float>> merge_lse_to_kernel(const MergeConventions& c, const MergeShape& s,
                                                      std::span<const float> lse) {
  if (c.lse_base == LseBase::e && c.lse_layout == LseLayout::b_h_sq) return std::nullopt;
  const std::vector<double> wide(lse.begin(), lse.end());
  const auto k = lse_to_kernel(base_and_layout(c), as_decode_lse(s), wide);
  return std::vector<float>(k.begin(), k.end());
}

MergeInputs inputs_to_kernel(const MergeConventions& c, const MergeInputs& in, std::vector<float>& lse_a_storage,
                             std::vector<float>& lse_b_storage) {
  MergeInputs k = in;
  if (auto a = merge_lse_to_kernel(c, in.shape, in.lse_a)) lse_a_storage = std::move(*a), k.lse_a = lse_a_storage;
  if (auto b = merge_lse_to_kernel(c, in.shape, in.lse_b)) lse_b_storage = std::move(*b), k.lse_b = lse_b_storage;
  return k;
}

void outputs_to_canonical(const MergeConventions& c, const MergeShape& s, MergeOutputs& o) {
  if (canonical(c) || static_cast<int64_t>(o.lse.size()) != s.heads * s.tokens || s.tokens == 0) return;
  o.lse = lse_to_canonical(base_and_layout(c), as_decode_lse(s), o.lse);
  // Its declared both-empty value becomes canonical -inf; the other infinity becomes +inf, the
  // wrong one, so a kernel writing what it did not declare is not silently accepted.
  if (c.both_empty_lse == EmptyRowLse::pos_inf) {
    for (auto& x : o.lse) {
      if (std::isinf(x)) x = -x;
    }
  }
}

void validate_merge_inputs(const MergeInputs& in, std::string_view who) {
  const auto& s = in.shape;
  const std::string prefix = who.empty() ? std::string() : fmt::format("{}: ", who);
  if (s.heads < 1 || s.head_dim < 1 || s.tokens < 0) {
    throw Error(fmt::format("{}tokens={} heads={} head_dim={}: tokens must be >= 0, heads and head_dim >= 1", prefix,
                            s.tokens, s.heads, s.head_dim));
  }
  if (s.dtype != StateDType::bf16 && s.dtype != StateDType::f16 && s.dtype != StateDType::f32) {
    throw Error(fmt::format("{}unknown state dtype {}", prefix, static_cast<int>(s.dtype)));
  }
  const int64_t values = s.tokens * s.heads * s.head_dim, rows = s.tokens * s.heads;
  const auto expect = [&](const char* what, std::size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      throw Error(fmt::format("{}{} has {} elements, the shape needs {}", prefix, what, got, want));
    }
  };
  const auto vb = static_cast<int64_t>(bytes_per_value(s.dtype));
  expect("out_a (bytes)", in.out_a.size(), values * vb);
  expect("out_b (bytes)", in.out_b.size(), values * vb);
  expect("lse_a", in.lse_a.size(), rows);
  expect("lse_b", in.lse_b.size(), rows);
  for (const auto& [lse, out, name] : {std::tuple{in.lse_a, in.out_a, "a"}, std::tuple{in.lse_b, in.out_b, "b"}}) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t t = 0; t < s.tokens; ++t) {
        const float l = lse[h * s.tokens + t];
        if (std::isnan(l)) throw Error(fmt::format("{}lse_{}[{}, {}] is NaN", prefix, name, h, t));
        if (std::isinf(l)) continue;  // an empty side: its out is never read
        for (int64_t d = 0; d < s.head_dim; ++d) {
          if (std::isnan(state_value(s.dtype, out, (t * s.heads + h) * s.head_dim + d))) {
            throw Error(fmt::format("{}out_{}[{}, {}, {}] is NaN on a side that attended something (lse {})", prefix,
                                    name, t, h, d, l));
          }
        }
      }
    }
  }
}

CostModel merge_cost_model(const MergeShape& s) {
  const double values = static_cast<double>(s.tokens) * s.heads * s.head_dim;
  CostModel c;
  c.bytes = 3.0 * values * static_cast<double>(bytes_per_value(s.dtype)) + 3.0 * 4.0 * s.tokens * s.heads;
  c.flops = 3.0 * values;
  return c;
}

std::optional<std::string> MergeImpl::check(const MergeShape& s) const {
  const auto& i = info();
  if (std::find(i.dtypes.begin(), i.dtypes.end(), s.dtype) == i.dtypes.end()) {
    return fmt::format("state dtype {} is not one it merges", to_string(s.dtype));
  }
  if (!i.head_dims.empty() && std::find(i.head_dims.begin(), i.head_dims.end(), s.head_dim) == i.head_dims.end()) {
    return fmt::format("head_dim={} is not one it claims", s.head_dim);
  }
  return std::nullopt;
}

}  // namespace mla
