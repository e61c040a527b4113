// MHA-form prefill cases (family prefill) and merges of partial attention states (family merge).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "h5io.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/golden/golden.hpp"

namespace mla::golden {

using detail::Reader;

namespace {

constexpr int64_t kMaxPrefillBatch = int64_t{1} << 20;
constexpr int64_t kMaxPrefillHeads = 1024;
constexpr int64_t kMaxWidth = 4096;


using detail::bf16_finite;
using detail::require_finite_bf16;
using detail::from_attrs;

// cu_seqlens: batch + 1 entries, 0 first, never decreasing, `total` last.
void check_cu(const Reader& r, const std::string& ds, const std::vector<int32_t>& cu, int64_t total,
              const char* total_name) {
  if (cu.front() != 0) r.fail(ds, "0 as the first entry", fmt::format("{}", cu.front()));
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      r.fail(ds, "entries that never decrease (monotone)", fmt::format("entry {} = {} after {}", i, cu[i], cu[i - 1]));
    }
  }
  if (cu.back() != total) {
    r.fail(ds, fmt::format("last entry {} ({} of the case attributes)", total, total_name), fmt::format("{}", cu.back()));
  }
}

// Which query rows attend nothing: the whole sequence when it has no key, and under the causal
// mask (bottom-right aligned) the first s_q - s_k rows when s_q > s_k.
std::vector<char> empty_rows(const PrefillCase& c) {
  std::vector<char> empty(static_cast<std::size_t>(c.shape.total_q), 0);
  for (int64_t i = 0; i < c.shape.batch; ++i) {
    const int64_t sq = c.s_q(i), sk = c.s_k(i);
    for (int64_t j = 0; j < sq; ++j) {
      empty[static_cast<std::size_t>(c.cu_seqlens_q[i] + j)] = sk == 0 || (c.shape.causal && sk - sq + j < 0);
    }
  }
  return empty;
}

// The truth is never NaN, and a row is empty (out 0, lse +inf in every head) exactly when it
// attends nothing; same_dtype follows the same rule.
void check_prefill_results(const Reader& r, const std::string& p, const PrefillCase& c) {
  const auto empty = empty_rows(c);
  const int64_t h = c.shape.heads, dv = c.shape.d_v, tq = c.shape.total_q;
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t t = 0; t < tq; ++t) {
      const std::size_t li = static_cast<std::size_t>(hh * tq + t);
      const double lse = c.truth_lse[li];
      const float lse_sd = c.same_dtype_lse[li];
      const bool e = empty[static_cast<std::size_t>(t)];
      const auto where = fmt::format("head {} row {}", hh, t);
      if (std::isnan(lse) || (e ? lse != std::numeric_limits<double>::infinity() : !std::isfinite(lse))) {
        r.fail(p + "/truth/lse", e ? "+inf in a row that attends nothing" : "a finite lse in a row that attends keys",
               fmt::format("{}: {}", where, lse));
      }
      if (std::isnan(lse_sd) || (e ? lse_sd != std::numeric_limits<float>::infinity() : !std::isfinite(lse_sd))) {
        r.fail(p + "/same_dtype/lse", e ? "+inf in a row that attends nothing" : "a finite lse in a row that attends keys",
               fmt::format("{}: {}", where, lse_sd));
      }
      for (int64_t d = 0; d < dv; ++d) {
        const std::size_t oi = static_cast<std::size_t>((t * h + hh) * dv + d);
        const double o = c.truth_out[oi];
        const uint16_t sd = c.same_dtype_out[oi];
        if (!std::isfinite(o) || (e && o != 0)) {
          r.fail(p + "/truth/out", e ? "0 in a row that attends nothing" : "finite values",
                 fmt::format("{} element {}: {}", where, d, o));
        }
        if (!bf16_finite(sd) || (e && (sd & 0x7FFF) != 0)) {
          r.fail(p + "/same_dtype/out", e ? "0 in a row that attends nothing" : "finite values",
                 fmt::format("{} element {}: 0x{:04X}", where, d, sd));
        }
      }
    }
  }
}

// Needles (SCHEMA.md "Prefill needles"): positions inside their sequence, ascending, and the
// stored k holding each needle (alpha at the last qk dim of every head).
void read_prefill_needles(const Reader& r, const std::string& p, PrefillCase& c) {
  const std::string g = p + "/needles";
  if (!r.exists(g)) return;
  const std::string rule = r.attr_str(g, "rule");
  if (rule != "prefill-needles-v1") r.fail(g, "rule 'prefill-needles-v1'", fmt::format("'{}'", rule));
  if (!c.inputs_stored) r.fail(g, "needles over stored inputs (they are written into inputs/*)", "inputs_stored = 0");
  c.needle_alpha = r.attr_real(g, "alpha");
  c.needle_spike = r.attr_real(g, "spike");
  if (!std::isfinite(c.needle_alpha) || c.needle_alpha <= 0) r.fail(g, "a finite positive alpha", fmt::format("{}", c.needle_alpha));
  const std::vector<int64_t> pd = r.dims(g + "/positions");
  if (pd.size() != 2 || pd[1] != 2) r.fail(g + "/positions", "shape [n, 2]", fmt::format("shape {}", detail::shape_str(pd)));
  c.needle_positions = r.read<int32_t>(g + "/positions", "int32", pd);
  for (int64_t n = 0; n < pd[0]; ++n) {
    const int64_t i = c.needle_positions[static_cast<std::size_t>(2 * n)];
    const int64_t t = c.needle_positions[static_cast<std::size_t>(2 * n + 1)];
    if (i < 0 || i >= c.shape.batch || t < 0 || t >= c.s_k(i)) {
      r.fail(g + "/positions", "(sequence, key position) with 0 <= position < s_k of the sequence",
             fmt::format("row {}: ({}, {})", n, i, t));
    }
    if (n > 0) {
      const int64_t pi = c.needle_positions[static_cast<std::size_t>(2 * n - 2)];
      const int64_t pt = c.needle_positions[static_cast<std::size_t>(2 * n - 1)];
      if (pi > i || (pi == i && pt >= t)) r.fail(g + "/positions", "ascending, distinct rows", fmt::format("row {}: ({}, {}) after ({}, {})", n, i, t, pi, pt));
    }
    const int64_t row = c.cu_seqlens_k[static_cast<std::size_t>(i)] + t;
    for (int64_t hh = 0; hh < c.shape.heads; ++hh) {
      const uint16_t bits = c.k[static_cast<std::size_t>((row * c.shape.heads + hh) * c.shape.d_qk + c.shape.d_qk - 1)];
      if (bf16_to_float(bits) != c.needle_alpha) {
        r.fail(p + "/inputs/k", "the needle overlay (alpha at the last dim of every needle key)",
               fmt::format("needle {} head {}: {}", n, hh, bf16_to_float(bits)));
      }
    }
  }
}

void read_prefill_attrs(const Reader& r, const std::string& p, PrefillCase& c) {
  c.shape.batch = static_cast<int>(r.attr_int(p, "batch", 1, kMaxPrefillBatch));
  c.shape.heads = static_cast<int>(r.attr_int(p, "heads", 1, kMaxPrefillHeads));
  c.shape.d_qk = static_cast<int>(r.attr_int(p, "d_qk", 1, kMaxWidth));
  c.shape.d_v = static_cast<int>(r.attr_int(p, "d_v", 1, kMaxWidth));
  c.shape.total_q = r.attr_int(p, "total_q", 0, kMaxElements);
  c.shape.total_k = r.attr_int(p, "total_k", 0, kMaxElements);
  c.shape.causal = r.attr_int(p, "causal", 0, 1) != 0;
  c.softmax_scale = r.attr_real(p, "softmax_scale");
  if (!std::isfinite(c.softmax_scale) || c.softmax_scale <= 0) {
    r.fail(p, "a finite positive softmax_scale", fmt::format("{}", c.softmax_scale));
  }
  c.seed = r.attr_int(p, "seed");
  c.inputs_stored = r.attr_int(p, "inputs_stored", 0, 1) != 0;
}

}  // namespace

double float16_to_double(uint16_t bits) { return f16_to_double(bits); }

PrefillCase load_prefill_case(const std::filesystem::path& file, const std::string& name) {
  const Reader r(file);
  const detail::Header h = detail::read_header(r);
  const std::string p = detail::case_path(r, name);
  PrefillCase c;
  c.file = file.string();
  c.name = name;
  c.family = h.family;
  detail::case_family(r, h, FamilyKind::prefill, p, c.description);
  read_prefill_attrs(r, p, c);
  const int64_t b = c.shape.batch, hd = c.shape.heads, tq = c.shape.total_q, tk = c.shape.total_k;
  const int64_t dqk = c.shape.d_qk, dv = c.shape.d_v;
  const std::vector<int64_t> q_shape{tq, hd, dqk}, k_shape{tk, hd, dqk}, v_shape{tk, hd, dv};
  const std::vector<int64_t> out_shape{tq, hd, c.shape.d_v}, lse_shape{hd, tq};
  const auto q_from = from_attrs({{"total_q", tq}, {"heads", hd}, {"d_qk", c.shape.d_qk}});
  const auto k_from = from_attrs({{"total_k", tk}, {"heads", hd}, {"d_qk", c.shape.d_qk}});
  const auto v_from = from_attrs({{"total_k", tk}, {"heads", hd}, {"d_v", c.shape.d_v}});
  const auto out_from = from_attrs({{"total_q", tq}, {"heads", hd}, {"d_v", c.shape.d_v}});
  // Every dataset against the attributes before anything is allocated.
  const char* names[] = {"q", "k", "v"};
  const std::vector<int64_t>* shapes[] = {&q_shape, &k_shape, &v_shape};
  const std::string* froms[] = {&q_from, &k_from, &v_from};
  for (int i = 0; i < 3; ++i) {
    if (c.inputs_stored) r.check(p + "/inputs/" + names[i], "bfloat16", *shapes[i], *froms[i]);
    else detail::check_generated(r, p + "/generated/" + names[i], "bfloat16", *shapes[i], *froms[i]);
  }
  const auto cu_from = from_attrs({{"batch + 1", b + 1}});
  r.check(p + "/inputs/cu_seqlens_q", "int32", std::vector<int64_t>{b + 1}, cu_from);
  r.check(p + "/inputs/cu_seqlens_k", "int32", std::vector<int64_t>{b + 1}, cu_from);
  r.check(p + "/truth/out", "float64", out_shape, out_from);
  r.check(p + "/truth/lse", "float64", lse_shape, out_from);
  r.check(p + "/same_dtype/out", "bfloat16", out_shape, out_from);
  r.check(p + "/same_dtype/lse", "float32", lse_shape, out_from);

  c.cu_seqlens_q = r.read<int32_t>(p + "/inputs/cu_seqlens_q", "int32", std::vector<int64_t>{b + 1});
  c.cu_seqlens_k = r.read<int32_t>(p + "/inputs/cu_seqlens_k", "int32", std::vector<int64_t>{b + 1});
  check_cu(r, p + "/inputs/cu_seqlens_q", c.cu_seqlens_q, tq, "total_q");
  check_cu(r, p + "/inputs/cu_seqlens_k", c.cu_seqlens_k, tk, "total_k");
  std::vector<uint16_t>* dst[] = {&c.q, &c.k, &c.v};
  for (int i = 0; i < 3; ++i) {
    *dst[i] = c.inputs_stored ? r.read<uint16_t>(p + "/inputs/" + names[i], "bfloat16", *shapes[i])
                              : detail::generate_bf16(r, p + "/generated/" + names[i], *shapes[i]);
    require_finite_bf16(r, p + (c.inputs_stored ? "/inputs/" : "/generated/") + names[i], *dst[i]);
  }
  read_prefill_needles(r, p, c);
  c.truth_out = r.read<double>(p + "/truth/out", "float64", out_shape);
  c.truth_lse = r.read<double>(p + "/truth/lse", "float64", lse_shape);
  c.same_dtype_out = r.read<uint16_t>(p + "/same_dtype/out", "bfloat16", out_shape);
  c.same_dtype_lse = r.read<float>(p + "/same_dtype/lse", "float32", lse_shape);
  check_prefill_results(r, p, c);
  return c;
}

namespace {

// An out may be NaN or infinite only in a row (token, head) whose side attended nothing (lse
// infinite); an lse is never NaN.
void check_side(const Reader& r, const std::string& p, const std::string& side, const MergeCase& c,
                const std::vector<double>& out, const std::vector<double>& lse) {
  const int64_t n = c.tokens, h = c.heads, d = c.head_dim;
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t t = 0; t < n; ++t) {
      const double l = lse[static_cast<std::size_t>(hh * n + t)];
      if (std::isnan(l)) r.fail(p + "/inputs/lse_" + side, "finite or infinite (empty side), never NaN", fmt::format("head {} token {}: NaN", hh, t));
      if (std::isinf(l)) continue;
      for (int64_t k = 0; k < d; ++k) {
        const double o = out[static_cast<std::size_t>((t * h + hh) * d + k)];
        if (!std::isfinite(o)) {
          r.fail(p + "/inputs/out_" + side, "finite values where the side's lse is finite",
                 fmt::format("token {} head {} element {}: {}", t, hh, k, o));
        }
      }
    }
  }
}

// Both results: never NaN; lse -inf exactly where both sides are empty (out 0 there), finite
// elsewhere.
void check_merged(const Reader& r, const std::string& p, const std::string& group, const MergeCase& c,
                  const std::vector<double>& out, const std::vector<double>& lse) {
  const int64_t n = c.tokens, h = c.heads, d = c.head_dim;
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t t = 0; t < n; ++t) {
      const std::size_t li = static_cast<std::size_t>(hh * n + t);
      const bool both = std::isinf(c.lse_a[li]) && std::isinf(c.lse_b[li]);
      const double l = lse[li];
      if (both ? l != -std::numeric_limits<double>::infinity() : !std::isfinite(l)) {
        r.fail(p + "/" + group + "/lse", both ? "-inf where both sides are empty" : "a finite lse where a side attended keys",
               fmt::format("head {} token {}: {}", hh, t, l));
      }
      for (int64_t k = 0; k < d; ++k) {
        const double o = out[static_cast<std::size_t>((t * h + hh) * d + k)];
        if (!std::isfinite(o) || (both && o != 0)) {
          r.fail(p + "/" + group + "/out", both ? "0 where both sides are empty" : "finite values",
                 fmt::format("token {} head {} element {}: {}", t, hh, k, o));
        }
      }
    }
  }
}

}  // namespace

MergeBuffers MergeCase::inputs() const {
  MergeBuffers b;
  b.shape = {tokens, static_cast<int>(heads), static_cast<int>(head_dim), state_dtype_from_string(out_dtype)};
  for (const double x : out_a) append_state_value(b.shape.dtype, x, b.out_a);
  for (const double x : out_b) append_state_value(b.shape.dtype, x, b.out_b);
  b.lse_a.assign(lse_a.begin(), lse_a.end());
  b.lse_b.assign(lse_b.begin(), lse_b.end());
  return b;
}

MergeCase load_merge_case(const std::filesystem::path& file, const std::string& name) {
  const Reader r(file);
  const detail::Header h = detail::read_header(r);
  const std::string p = detail::case_path(r, name);
  MergeCase c;
  c.file = file.string();
  c.name = name;
  c.family = h.family;
  detail::case_family(r, h, FamilyKind::merge, p, c.description);
  c.tokens = r.attr_int(p, "tokens", 0, kMaxElements);
  c.heads = r.attr_int(p, "heads", 1, kMaxPrefillHeads);
  c.head_dim = r.attr_int(p, "head_dim", 1, kMaxWidth);
  c.out_dtype = r.attr_str(p, "out_dtype");
  if (c.out_dtype != "bfloat16" && c.out_dtype != "float16" && c.out_dtype != "float32") {
    r.fail(p, "out_dtype one of bfloat16, float16, float32", fmt::format("'{}'", c.out_dtype));
  }
  c.seed = r.attr_int(p, "seed");
  const std::vector<int64_t> out_shape{c.tokens, c.heads, c.head_dim}, lse_shape{c.heads, c.tokens};
  const auto out_from = from_attrs({{"tokens", c.tokens}, {"heads", c.heads}, {"head_dim", c.head_dim}});
  const auto lse_from = from_attrs({{"heads", c.heads}, {"tokens", c.tokens}});
  for (const char* side : {"a", "b"}) {
    r.check(p + "/inputs/out_" + side, c.out_dtype, out_shape, out_from);
    r.check(p + "/inputs/lse_" + side, "float32", lse_shape, lse_from);
  }
  r.check(p + "/truth/out", "float64", out_shape, out_from);
  r.check(p + "/truth/lse", "float64", lse_shape, lse_from);
  r.check(p + "/same_dtype/out", c.out_dtype, out_shape, out_from);
  r.check(p + "/same_dtype/lse", "float32", lse_shape, lse_from);

  c.out_a = detail::read_widened(r, p + "/inputs/out_a", c.out_dtype, out_shape);
  c.out_b = detail::read_widened(r, p + "/inputs/out_b", c.out_dtype, out_shape);
  c.lse_a = detail::read_widened(r, p + "/inputs/lse_a", "float32", lse_shape);
  c.lse_b = detail::read_widened(r, p + "/inputs/lse_b", "float32", lse_shape);
  check_side(r, p, "a", c, c.out_a, c.lse_a);
  check_side(r, p, "b", c, c.out_b, c.lse_b);
  c.truth_out = r.read<double>(p + "/truth/out", "float64", out_shape);
  c.truth_lse = r.read<double>(p + "/truth/lse", "float64", lse_shape);
  c.same_dtype_out = detail::read_widened(r, p + "/same_dtype/out", c.out_dtype, out_shape);
  c.same_dtype_lse = r.read<float>(p + "/same_dtype/lse", "float32", lse_shape);
  check_merged(r, p, "truth", c, c.truth_out, c.truth_lse);
  const std::vector<double> sd_lse(c.same_dtype_lse.begin(), c.same_dtype_lse.end());
  check_merged(r, p, "same_dtype", c, c.same_dtype_out, sd_lse);
  return c;
}

}  // namespace mla::golden
