#include "gpu_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/ref/attention.hpp"

namespace mla::gputest {

Result same_dtype_attention(const AttnInputs& in) {
  const ref::PagedCache cache(in);
  const AttnShape& s = in.shape;
  const int64_t B = s.batch, SQ = s.s_q, H = s.heads;
  Result r;
  r.out.assign(static_cast<std::size_t>(B * SQ * H * 512), 0.0);
  r.lse.assign(static_cast<std::size_t>(B * H * SQ), std::numeric_limits<float>::infinity());
  const float scale = static_cast<float>(in.softmax_scale);
  const bool fp8 = s.cache_format == CacheFormat::fp8;
  std::vector<float> kv, q(576), x, p;
  std::vector<int64_t> pos;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = cache.seqlen(b);
    for (int64_t sq = 0; sq < SQ; ++sq) {
      // The keys of this query: dense, positions 0 .. last (causal-aware); sparse, the row's
      // valid indices (ascending: the order only moves fp32 rounding).
      if (s.topk > 0) {
        pos = ref::sparse_row_positions(in, b, sq);
      } else {
        pos.resize(static_cast<std::size_t>(ref::dense_last_position(s, L, sq) + 1));
        for (std::size_t j = 0; j < pos.size(); ++j) pos[j] = static_cast<int64_t>(j);
      }
      const int64_t n = static_cast<int64_t>(pos.size());
      if (n <= 0) continue;
      kv.resize(static_cast<std::size_t>(n * 576));
      for (int64_t j = 0; j < n; ++j) {
        float* k = kv.data() + j * 576;
        cache.token(b, pos[static_cast<std::size_t>(j)], k);
        // FP8: the dequantized value rounded to bf16, as a kernel dequantizing into bf16 tiles
        // sees it (the schema's definition; the rope part is bf16 already).
        if (fp8)
          for (int d = 0; d < 576; ++d) k[d] = bf16_to_float(bf16_from_float(k[d]));
      }
      x.resize(static_cast<std::size_t>(n));
      p.resize(static_cast<std::size_t>(n));
      for (int64_t h = 0; h < H; ++h) {
        const uint16_t* qb = in.q.data() + ((b * SQ + sq) * H + h) * 576;
        for (int d = 0; d < 576; ++d) q[static_cast<std::size_t>(d)] = bf16_to_float(qb[d]);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          float dot = 0.f;
          const float* k = kv.data() + j * 576;
          for (int d = 0; d < 576; ++d) dot += q[static_cast<std::size_t>(d)] * k[d];
          x[static_cast<std::size_t>(j)] = dot * scale;
          m = std::max(m, x[static_cast<std::size_t>(j)]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j < n; ++j) sum += (p[static_cast<std::size_t>(j)] = std::exp(x[static_cast<std::size_t>(j)] - m));
        for (int64_t j = 0; j < n; ++j)
          p[static_cast<std::size_t>(j)] = bf16_to_float(bf16_from_float(p[static_cast<std::size_t>(j)] / sum));
        double* o = r.out.data() + ((b * SQ + sq) * H + h) * 512;
        for (int c = 0; c < 512; ++c) {
          float acc = 0.f;
          for (int64_t j = 0; j < n; ++j) acc += p[static_cast<std::size_t>(j)] * kv[static_cast<std::size_t>(j * 576 + c)];
          o[c] = bf16_to_float(bf16_from_float(acc));
        }
        r.lse[static_cast<std::size_t>((b * H + h) * SQ + sq)] = static_cast<double>(m + std::log(sum));
      }
    }
  }
  return r;
}

Result truth_attention(const AttnInputs& in) {
  ref::AttnResult t = ref::attention_fp64(in);
  return Result{std::move(t.out), std::move(t.lse)};
}

std::unique_ptr<Problem> make_problem(const testing::AttnSpec& spec, const testing::Layout& layout) {
  auto p = std::make_unique<Problem>();
  p->logical = testing::make_logical(spec);
  p->paged = testing::lay_out(p->logical, layout);
  p->in = p->paged.inputs();
  p->truth = truth_attention(p->in);
  p->same = same_dtype_attention(p->in);
  return p;
}

AttnOutputs run_once(const AttentionImpl& impl, const AttnInputs& in) {
  auto prepared = impl.prepare(in);
  prepared->run();
  prepared->synchronize();
  return prepared->results();
}

void PrintTo(const NamedSpec& c, std::ostream* os) {
  // No brackets, commas or semicolons: ctest's label script reads these names as a CMake list.
  *os << c.name << " lengths " << fmt::format("{}", fmt::join(c.spec.seqlens, " ")) << " s_q " << c.spec.s_q
      << " heads " << c.spec.heads << " page " << c.page_size;
}

// Each case targets a hazard; the comment says which.
std::vector<NamedSpec> synthetic_cases() {
  std::vector<NamedSpec> v;
  auto add = [&](std::string name, std::vector<int32_t> lens, int s_q, int heads, bool causal,
                 int page_size, uint64_t seed, double q_std = 1.0) {
    testing::AttnSpec s;
    s.seqlens = std::move(lens);
    s.s_q = s_q;
    s.heads = heads;
    s.causal = causal;
    s.seed = seed;
    s.q_std = q_std;
    v.push_back({std::move(name), s, page_size});
  };
  // Varlen with an empty sequence, a one-token sequence and lengths around the 32-token tile.
  add("varlen_h16", {37, 0, 130, 64, 1, 200, 33}, 1, 16, true, 16, 1);
  // All 128 heads (two 64-row tiles), page size 64 (FlashMLA's).
  add("h128", {300, 65}, 1, 128, true, 64, 2);
  // One head: 15 of the 16 tile rows are padding and must be neither read nor written (bug 5).
  add("h1_page1", {1, 33, 70}, 1, 1, true, 1, 3);
  // Speculative decode: causal rows, including rows with nothing to attend (L < s_q) (bug 6),
  // and a page size that divides nothing.
  add("sq4_causal_odd_pages", {2, 5, 100, 0, 3}, 4, 3, true, 7, 4);
  // Non-causal multi-query.
  add("sq2_noncausal_h64", {77, 129}, 2, 64, false, 32, 5);
  // 35 rows per sequence: one 64-row tile holding parts of 7 query positions.
  add("sq7_h5", {50, 3, 260}, 7, 5, true, 16, 6);
  // Many row tiles per sequence (s_q·h = 512 rows).
  add("sq256_h2", {300, 10}, 256, 2, true, 64, 7);
  // One long sequence on a small batch: automatic split-KV with a combine (bug 1, 3).
  add("long_20k", {20000, 3}, 1, 16, true, 64, 8);
  // Large logits (q std 100, scaled logits in the hundreds): max-subtracted exponentials and
  // lse combine must not overflow (bug 3).
  add("large_logits", {500, 1000, 0}, 2, 16, true, 64, 9, 100.0);
  // Odd head count between tile sizes (the 32-row instance) (bug 5: 8 heads crashed a kernel).
  add("h8_sq3", {90, 45}, 3, 8, true, 16, 10);
  return v;
}


std::vector<int64_t> out_shape(const AttnShape& s) { return {s.batch, s.s_q, s.heads, 512}; }
std::vector<int64_t> lse_shape(const AttnShape& s) { return {s.batch, s.heads, s.s_q}; }

::testing::AssertionResult matches(const std::string& what, const AttnOutputs& got,
                                   const AttnShape& shape, std::span<const double> truth_out,
                                   std::span<const double> truth_lse,
                                   std::optional<std::span<const double>> same_out) {
  const auto os = out_shape(shape), ls = lse_shape(shape);
  const tol::Tolerance& to = tol::tolerance_for(got.dtype, shape.cache_format, "out");
  const tol::Tolerance& tl = tol::tolerance_for(got.dtype, shape.cache_format, "lse");
  const tol::Comparison co = tol::judge("out", got.out, truth_out, os, to, same_out);
  const tol::Comparison cl = tol::judge("lse", got.lse, truth_lse, ls, tl);
  if (co.verdict == tol::Verdict::pass && cl.verdict == tol::Verdict::pass) return ::testing::AssertionSuccess();
  auto describe = [](const tol::Comparison& c, const tol::Tolerance& t) {
    if (c.verdict == tol::Verdict::pass) return std::string();
    return fmt::format("\n  {} fails '{}': {} (max abs {:.3g} at {}, max rel {:.3g} at {}, {} of {} "
                       "elements outside, NaN mismatches {}, Inf mismatches {}{})",
                       c.what, t.name, fmt::join(c.reasons, "; "), c.max_abs_err,
                       tol::format_index(c.max_abs_index), c.max_rel_err,
                       tol::format_index(c.max_rel_index), c.elements_failed, c.numel, c.nan_mismatch,
                       c.inf_mismatch,
                       c.error_ratio ? fmt::format(", error ratio {:.3g}", *c.error_ratio) : std::string());
  };
  return ::testing::AssertionFailure() << what << describe(co, to) << describe(cl, tl);
}

::testing::AssertionResult bitwise_equal(const std::string& what, std::span<const double> a,
                                         std::span<const double> b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure()
             << what << ": first difference at flat index " << i << ": "
             << fmt::format("{:.17g} vs {:.17g}", a[i], b[i]);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mla::gputest
