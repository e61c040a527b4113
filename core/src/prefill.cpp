#include "mla/core/prefill.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {
namespace {

// The lse of a prefill is the decode lse of one sequence of total_q query rows: the layouts and
// their conversions are the same (conventions.hpp), so they are reused, not written twice.
AttnShape as_decode_lse(const PrefillShape& s) {
  AttnShape a;
  a.batch = 1;
  a.heads = s.heads;
  a.s_q = static_cast<int>(s.total_q);
  return a;
}

Conventions lse_conventions(const PrefillConventions& c) {
  Conventions d;
  d.lse_base = c.lse_base;
  d.lse_layout = c.lse_layout;
  d.empty_row_lse = c.empty_row_lse;
  return d;
}

}  // namespace

std::vector<int64_t> out_shape(const PrefillShape& s) { return {s.total_q, s.heads, s.d_v}; }
std::vector<int64_t> lse_shape(const PrefillShape& s) { return {s.heads, s.total_q}; }

PrefillBuffers::PrefillBuffers(const PrefillInputs& in)
    : shape(in.shape),
      softmax_scale(in.softmax_scale),
      q(in.q.begin(), in.q.end()),
      k(in.k.begin(), in.k.end()),
      v(in.v.begin(), in.v.end()),
      cu_seqlens_q(in.cu_seqlens_q.begin(), in.cu_seqlens_q.end()),
      cu_seqlens_k(in.cu_seqlens_k.begin(), in.cu_seqlens_k.end()) {}

PrefillInputs PrefillBuffers::view() const {
  return PrefillInputs{shape, softmax_scale, q, k, v, cu_seqlens_q, cu_seqlens_k};
}

// ---- conventions ----------------------------------------------------------------------------

const char* to_string(CausalAlignment a) { return a == CausalAlignment::top_left ? "top_left" : "bottom_right"; }

CausalAlignment causal_alignment_from_string(std::string_view s) {
  for (auto a : {CausalAlignment::bottom_right, CausalAlignment::top_left}) {
    if (s == to_string(a)) return a;
  }
  throw Error(fmt::format("unknown causal alignment '{}' (expected bottom_right or top_left)", s));
}

nlohmann::json to_json(const PrefillConventions& c) {
  return {{"lse_base", to_string(c.lse_base)},
          {"lse_layout", to_string(c.lse_layout)},
          {"empty_row_lse", to_string(c.empty_row_lse)},
          {"v_padded", c.v_padded},
          {"causal_alignment", to_string(c.alignment)}};
}

PrefillConventions prefill_conventions_from_json(const nlohmann::json& j) {
  PrefillConventions c;
  std::string field = "prefill conventions";
  try {
    field = "lse_base";
    c.lse_base = lse_base_from_string(j.at(field).get<std::string>());
    field = "lse_layout";
    c.lse_layout = lse_layout_from_string(j.at(field).get<std::string>());
    field = "empty_row_lse";
    c.empty_row_lse = empty_row_lse_from_string(j.at(field).get<std::string>());
    field = "v_padded";
    c.v_padded = j.at(field).get<bool>();
    field = "causal_alignment";
    c.alignment = causal_alignment_from_string(j.at(field).get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("prefill conventions: field '{}' is missing or malformed: {}", field, e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("prefill conventions: field '{}': {}", field, e.what()));
  }
  return c;
}

std::optional<std::string> prefill_alignment_refusal(const PrefillConventions& c, const PrefillInputs& in) {
  if (c.alignment == CausalAlignment::bottom_right || !in.shape.causal) return std::nullopt;
  const auto seqs = prefill_sequences(in);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].s_q != seqs[i].s_k) {
      return fmt::format("sequence {} has {} queries and {} keys: a top-left causal mask differs from the "
                         "bottom-right one there",
                         i, seqs[i].s_q, seqs[i].s_k);
    }
  }
  return std::nullopt;
}

int kernel_v_width(const PrefillConventions& c, const PrefillShape& s) { return c.v_padded ? s.d_qk : s.d_v; }

std::optional<std::vector<uint16_t>> v_to_kernel(const PrefillConventions& c, const PrefillInputs& in) {
  if (!c.v_padded) return std::nullopt;
  const auto& s = in.shape;
  const int64_t rows = s.total_k * s.heads, wide = s.d_qk, narrow = s.d_v;
  if (static_cast<int64_t>(in.v.size()) != rows * narrow) {
    throw Error(fmt::format("v has {} elements, the shape needs {}", in.v.size(), rows * narrow));
  }
  std::vector<uint16_t> padded(static_cast<std::size_t>(rows * wide), uint16_t{0});  // bf16 +0
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(in.v.begin() + r * narrow, narrow, padded.begin() + r * wide);
  }
  return padded;
}

PrefillInputs inputs_to_kernel(const PrefillConventions& c, const PrefillInputs& in,
                               std::vector<uint16_t>& v_storage) {
  PrefillInputs k = in;
  if (auto padded = v_to_kernel(c, in)) {
    v_storage = std::move(*padded);
    k.v = v_storage;
    k.shape.d_v = kernel_v_width(c, in.shape);
  }
  return k;
}

void outputs_to_canonical(const PrefillConventions& c, const PrefillShape& s, PrefillOutputs& o) {
  const int64_t rows = s.total_q * s.heads;
  if (c.v_padded && static_cast<int64_t>(o.out.size()) == rows * s.d_qk) {
    std::vector<double> cut(static_cast<std::size_t>(rows * s.d_v));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(o.out.begin() + r * s.d_qk, s.d_v, cut.begin() + r * s.d_v);
    }
    o.out = std::move(cut);
  }
  if (static_cast<int64_t>(o.lse.size()) != rows || s.total_q == 0) return;
  AttnOutputs lse_only;
  lse_only.lse = std::move(o.lse);
  outputs_to_canonical(lse_conventions(c), as_decode_lse(s), lse_only);
  o.lse = std::move(lse_only.lse);
}

// ---- well-formed inputs ---------------------------------------------------------------------

std::vector<PrefillSequence> prefill_sequences(const PrefillInputs& in) {
  std::vector<PrefillSequence> seqs(static_cast<std::size_t>(std::max(0, in.shape.batch)));
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].q_begin = in.cu_seqlens_q[i];
    seqs[i].s_q = in.cu_seqlens_q[i + 1] - in.cu_seqlens_q[i];
    seqs[i].k_begin = in.cu_seqlens_k[i];
    seqs[i].s_k = in.cu_seqlens_k[i + 1] - in.cu_seqlens_k[i];
  }
  return seqs;
}

int64_t prefill_last_key(bool causal, const PrefillSequence& seq, int64_t i) {
  if (seq.s_k == 0) return -1;
  if (!causal) return seq.s_k - 1;
  const int64_t last = std::min(seq.s_k - seq.s_q + i, seq.s_k - 1);
  return last < 0 ? -1 : last;
}

void validate_prefill_inputs(const PrefillInputs& in, std::string_view who) {
  const PrefillShape& sh = in.shape;
  const std::string prefix = who.empty() ? std::string() : fmt::format("{}: ", who);
  if (sh.d_qk != kMhaDqk || sh.d_v != kMhaDv) {
    throw UnsupportedError(fmt::format("{}d_qk={} d_v={}: MLA's prefill in the MHA form is defined for {}/{}", prefix,
                                       sh.d_qk, sh.d_v, kMhaDqk, kMhaDv));
  }
  auto at_least = [&](const char* name, int64_t v, int64_t lo) {
    if (v < lo) throw Error(fmt::format("{}{}={} must be >= {}", prefix, name, v, lo));
  };
  at_least("batch", sh.batch, 1);
  at_least("heads", sh.heads, 1);
  at_least("total_q", sh.total_q, 0);
  at_least("total_k", sh.total_k, 0);
  if (!std::isfinite(in.softmax_scale) || !(in.softmax_scale > 0)) {
    throw Error(fmt::format("{}softmax_scale {} is not a finite positive number", prefix, in.softmax_scale));
  }
  auto expect_size = [&](const char* what, std::size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want) {
      throw Error(fmt::format("{}{} has {} elements, the shape needs {}", prefix, what, got, want));
    }
  };
  expect_size("q", in.q.size(), sh.total_q * sh.heads * sh.d_qk);
  expect_size("k", in.k.size(), sh.total_k * sh.heads * sh.d_qk);
  expect_size("v", in.v.size(), sh.total_k * sh.heads * sh.d_v);
  auto check_cu = [&](const char* name, std::span<const int32_t> cu, int64_t total) {
    expect_size(name, cu.size(), int64_t{sh.batch} + 1);
    if (cu[0] != 0) throw Error(fmt::format("{}{}[0] = {}: the first sequence starts at row 0", prefix, name, cu[0]));
    for (std::size_t i = 1; i < cu.size(); ++i) {
      if (cu[i] < cu[i - 1]) {
        throw Error(fmt::format("{}{}[{}] = {} < {}[{}] = {}: the offsets must not decrease", prefix, name, i, cu[i],
                                name, i - 1, cu[i - 1]));
      }
    }
    if (cu.back() != total) {
      throw Error(fmt::format("{}{}[{}] = {}, but the batch holds {} rows", prefix, name, cu.size() - 1, cu.back(), total));
    }
  };
  check_cu("cu_seqlens_q", in.cu_seqlens_q, sh.total_q);
  check_cu("cu_seqlens_k", in.cu_seqlens_k, sh.total_k);
}

// ---- cost -----------------------------------------------------------------------------------

int64_t prefill_attended_pairs(const PrefillInputs& in) {
  int64_t pairs = 0;
  for (const auto& seq : prefill_sequences(in)) {
    if (!in.shape.causal) {
      pairs += seq.s_q * seq.s_k;
      continue;
    }
    // Row by row, as the mask itself is defined: a row attends last key + 1 keys (none when -1).
    for (int64_t i = 0; i < seq.s_q; ++i) pairs += prefill_last_key(true, seq, i) + 1;
  }
  return pairs;
}

CostModel prefill_cost_model(const PrefillInputs& in, OutDType out_dtype) {
  const auto& s = in.shape;
  CostModel c;
  c.flops = 2.0 * static_cast<double>(prefill_attended_pairs(in)) * s.heads * (s.d_qk + s.d_v);
  const double h = s.heads;
  c.bytes = 2.0 * h * (static_cast<double>(s.total_q) * s.d_qk + static_cast<double>(s.total_k) * (s.d_qk + s.d_v)) +
            static_cast<double>(out_bytes_per_value(out_dtype)) * h * static_cast<double>(s.total_q) * s.d_v +
            4.0 * h * static_cast<double>(s.total_q);
  return c;
}

nlohmann::json to_json(const PrefillShape& s) {
  nlohmann::json j = {{"batch", s.batch},     {"heads", s.heads},   {"total_q", s.total_q},
                      {"total_k", s.total_k}, {"causal", s.causal}};
  if (s.d_qk != kMhaDqk) j["d_qk"] = s.d_qk;
  if (s.d_v != kMhaDv) j["d_v"] = s.d_v;
  return j;
}

PrefillShape prefill_shape_from_json(const nlohmann::json& j) {
  PrefillShape s;
  std::string field = "shape";
  try {
    field = "batch";
    s.batch = j.at(field).get<int>();
    field = "heads";
    s.heads = j.at(field).get<int>();
    field = "total_q";
    s.total_q = j.at(field).get<int64_t>();
    field = "total_k";
    s.total_k = j.at(field).get<int64_t>();
    field = "causal";
    s.causal = j.at(field).get<bool>();
    field = "d_qk";
    s.d_qk = j.value(field, kMhaDqk);
    field = "d_v";
    s.d_v = j.value(field, kMhaDv);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("prefill shape: field '{}' is missing or malformed: {}", field, e.what()));
  }
  return s;
}

}  // namespace mla
