#include "mla/core/topk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

std::vector<int64_t> logits_shape(const TopkShape& s) { return {s.rows, s.n}; }
std::vector<int64_t> indices_shape(const TopkShape& s) { return {s.rows, s.k}; }

TopkBuffers::TopkBuffers(const TopkInputs& in)
    : shape(in.shape),
      logits(in.logits.begin(), in.logits.end()),
      starts(in.starts.begin(), in.starts.end()),
      ends(in.ends.begin(), in.ends.end()) {}

TopkInputs TopkBuffers::view() const { return TopkInputs{shape, logits, starts, ends}; }

const char* to_string(IndexBase b) { return b == IndexBase::relative ? "relative" : "absolute"; }

IndexBase index_base_from_string(std::string_view s) {
  if (s == "relative") return IndexBase::relative;
  if (s == "absolute") return IndexBase::absolute;
  throw Error(fmt::format("unknown top-k index base '{}' (expected relative or absolute)", s));
}

const char* to_string(LogitsPrecision p) { return p == LogitsPrecision::f32 ? "f32" : "bf16"; }

LogitsPrecision logits_precision_from_string(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "fp32") return LogitsPrecision::f32;
  if (s == "bf16" || s == "bfloat16") return LogitsPrecision::bf16;
  throw Error(fmt::format("unknown top-k logits precision '{}' (expected f32 or bf16)", s));
}

nlohmann::json to_json(const TopkConventions& c) {
  return {{"index_base", to_string(c.index_base)}, {"sorted", c.sorted}};
}

TopkConventions topk_conventions_from_json(const nlohmann::json& j) {
  TopkConventions c;
  std::string field = "top-k conventions";
  try {
    field = "index_base";
    c.index_base = index_base_from_string(j.at(field).get<std::string>());
    field = "sorted";
    c.sorted = j.at(field).get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("top-k conventions: field '{}' is missing or malformed: {}", field, e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("top-k conventions: field '{}': {}", field, e.what()));
  }
  return c;
}

void topk_outputs_to_canonical(const TopkConventions& c, const TopkInputs& in, TopkOutputs& o) {
  const auto& s = in.shape;
  if (c.index_base == IndexBase::absolute || static_cast<int64_t>(o.indices.size()) != s.rows * s.k ||
      static_cast<int64_t>(in.starts.size()) != s.rows) {
    return;
  }
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t i = 0; i < s.k; ++i) {
      auto& x = o.indices[static_cast<std::size_t>(r * s.k + i)];
      if (x >= 0) x += in.starts[static_cast<std::size_t>(r)];
    }
  }
}

void validate_topk_inputs(const TopkInputs& in, std::string_view who) {
  const auto& s = in.shape;
  const std::string prefix = who.empty() ? std::string() : fmt::format("{}: ", who);
  if (s.rows < 0 || s.n < 0 || s.k < 1) {
    throw Error(fmt::format("{}rows={} n={} k={}: rows and n must be >= 0, k >= 1", prefix, s.rows, s.n, s.k));
  }
  if (s.n > std::numeric_limits<int32_t>::max()) {
    throw Error(fmt::format("{}n={} does not fit the int32 indices (at most {})", prefix, s.n,
                            std::numeric_limits<int32_t>::max()));
  }
  const auto expect = [&](const char* what, std::size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      throw Error(fmt::format("{}{} has {} elements, the shape needs {}", prefix, what, got, want));
    }
  };
  expect("logits", in.logits.size(), s.rows * s.n);
  expect("starts", in.starts.size(), s.rows);
  expect("ends", in.ends.size(), s.rows);
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t b = in.starts[static_cast<std::size_t>(r)], e = in.ends[static_cast<std::size_t>(r)];
    if (b < 0 || b > s.n) throw Error(fmt::format("{}starts[{}] = {} is outside [0, n = {}]", prefix, r, b, s.n));
    if (e < 0 || e > s.n) throw Error(fmt::format("{}ends[{}] = {} is outside [0, n = {}]", prefix, r, e, s.n));
    for (int64_t j = b; j < e; ++j) {
      const float x = in.logits[static_cast<std::size_t>(r * s.n + j)];
      // NaN has no place in an order; +inf would make every finite logit a near-tie of nothing.
      // -inf is a masked position.
      if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
        throw Error(fmt::format("{}logits[{}, {}] is {} inside the row's range [{}, {}) (only finite values and "
                                "-inf for a masked position are allowed there)",
                                prefix, r, j, x, b, e));
      }
    }
  }
}

CostModel topk_cost_model(const TopkInputs& in) {
  const auto& s = in.shape;
  double read = 0;
  const std::size_t rows = std::min({static_cast<std::size_t>(std::max<int64_t>(s.rows, 0)), in.starts.size(),
                                     in.ends.size()});
  for (std::size_t r = 0; r < rows; ++r) read += std::max(0, in.ends[r] - in.starts[r]);
  CostModel c;
  c.bytes = 4.0 * read + 8.0 * static_cast<double>(s.rows) + 4.0 * static_cast<double>(s.rows) * s.k;
  c.flops = 0;
  return c;
}

std::optional<std::string> TopkImpl::check(const TopkShape& s) const {
  const auto& i = info();
  if (!i.ks.empty() && std::find(i.ks.begin(), i.ks.end(), s.k) == i.ks.end()) {
    return fmt::format("k={} is not one it claims", s.k);
  }
  if (i.max_n > 0 && s.n > i.max_n) return fmt::format("n={} exceeds the longest row it takes ({})", s.n, i.max_n);
  return std::nullopt;
}

}  // namespace mla
