// L1: the long cases are sensitive. For every attention case of the catalog with a sequence of
// 16K tokens or more (each carries needles, fixtures/SCHEMA.md "Needles"), the bugs that slip
// through a long case without them are computed here and measured against the case's own bounds
// from the tolerance table:
//   * dropping, duplicating or misreading (reading its neighbour instead) any single needle —
//     closed form from the stored truth: with p = exp(scale·q·k − lse) the needle's weight,
//     dropping it gives out' = (out − p·v)/(1 − p), lse' = lse + log(1 − p), and so on;
//   * dropping the last token of every sequence (the fault kernel that carries that bug,
//     kernels/faults), reading one token past the end of each, and ignoring the block table
//     (pages assumed contiguous) — recomputed by the fp64 reference on the perturbed inputs and
//     judged by judge_attention.
// "Effect" is the element rule's bound use: max |Δ| / max(atol_used, rtol·|truth|) over out and
// lse, under every output dtype's entries (the weakest counts); every bug must reach 10
// (a kernel with it is at least 10x outside), or read poison (NaN) or a block outside kv_cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/core/attention.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/faults/faults.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/attention.hpp"
#include "mla/ref/attention.hpp"
#include "support/goldens.hpp"

namespace {

using mla::golden::AttnCase;

constexpr double kRequired = 10.0;
constexpr int64_t kLong = 16384;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Bounds {
  mla::OutDType dtype = mla::OutDType::f64;
  const mla::tol::Tolerance* out = nullptr;
  const mla::tol::Tolerance* lse = nullptr;
  double atol_out = 0, atol_lse = 0;
};

// The entries the judge holds a kernel of output `dtype` to on this case's cache format, with the
// case's own atol (scaled by its max|truth|).
Bounds bounds_for(const AttnCase& c, mla::OutDType dtype) {
  Bounds b;
  b.dtype = dtype;
  b.out = &mla::attention_tolerance(dtype, c.shape.cache_format, "out");
  b.lse = &mla::attention_tolerance(dtype, c.shape.cache_format, "lse");
  double mo = 0, ml = 0;
  for (double v : c.truth_out) mo = std::max(mo, std::fabs(v));
  for (double v : c.truth_lse)
    if (std::isfinite(v)) ml = std::max(ml, std::fabs(v));
  b.atol_out = mla::tol::effective_atol(*b.out, mo);
  b.atol_lse = mla::tol::effective_atol(*b.lse, ml);
  return b;
}

struct Effect {
  double out = 0, lse = 0;
  std::string note;  // "NaN" (poison read), "outside kv_cache: ..." (an address no buffer has)
  bool detected_otherwise() const { return !note.empty(); }
  double worst() const { return detected_otherwise() ? kInf : std::max(out, lse); }
};

double use(double delta, double truth, double atol, double rtol) {
  return std::fabs(delta) / std::max(atol, rtol * std::fabs(truth));
}

std::vector<double> token(const AttnCase& c, int64_t seq, int64_t t) {
  const auto& s = c.shape;
  const int64_t blk = c.block_table[static_cast<std::size_t>(seq * s.max_blocks + t / s.page_size)];
  const auto* bits = reinterpret_cast<const uint16_t*>(c.kv_cache.data()) +
                     static_cast<std::size_t>(blk * s.page_size + t % s.page_size) * mla::kQkDim;
  std::vector<double> k(mla::kQkDim);
  for (std::size_t d = 0; d < mla::kQkDim; ++d) k[d] = mla::bf16_to_float(bits[d]);
  return k;
}

// q widened once: [b, s_q, h, 576].
std::vector<double> widened_q(const AttnCase& c) {
  std::vector<double> q(c.q.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = mla::bf16_to_float(c.q[i]);
  return q;
}

double logit(const AttnCase& c, const std::vector<double>& q, int64_t seq, int64_t row, int64_t head,
             const std::vector<double>& k) {
  const auto& s = c.shape;
  const double* qr = q.data() + static_cast<std::size_t>(((seq * s.s_q + row) * s.heads + head) * mla::kQkDim);
  double dot = 0;
  for (std::size_t d = 0; d < mla::kQkDim; ++d) dot += qr[d] * k[d];
  return c.softmax_scale * dot;
}

// One needle of sequence `seq` at position `t` removed (mult -1), duplicated (+1), or replaced by
// the token at `t2` (mult 0 and t2 >= 0): the effect on every row that sees it, in closed form,
// against each of `bounds`.
std::vector<Effect> closed_form(const AttnCase& c, const std::vector<double>& q, const std::vector<Bounds>& bounds,
                                int64_t seq, int64_t t, int mult, int64_t t2) {
  const auto& s = c.shape;
  const int64_t L = c.cache_seqlens[static_cast<std::size_t>(seq)];
  const auto k = token(c, seq, t);
  const std::vector<double> k2 = t2 >= 0 ? token(c, seq, t2) : std::vector<double>{};
  std::vector<Effect> e(bounds.size());
  for (int64_t row = 0; row < s.s_q; ++row) {
    if (t > mla::dense_last_position(s, L, row)) continue;
    for (int64_t h = 0; h < s.heads; ++h) {
      const double lse = c.truth_lse[static_cast<std::size_t>((seq * s.heads + h) * s.s_q + row)];
      const double p = std::exp(logit(c, q, seq, row, h, k) - lse);
      const double p2 = t2 >= 0 ? std::exp(logit(c, q, seq, row, h, k2) - lse) : 0.0;
      // Σ' / Σ: the new normalizer relative to the old one.
      const double ratio = t2 >= 0 ? 1 - p + p2 : 1 + mult * p;
      for (std::size_t j = 0; j < bounds.size(); ++j) {
        e[j].lse = std::max(e[j].lse, use(std::log(ratio), lse, bounds[j].atol_lse, bounds[j].lse->rtol));
      }
      const double* o = c.truth_out.data() + static_cast<std::size_t>(((seq * s.s_q + row) * s.heads + h) * mla::kLatentDim);
      for (std::size_t d = 0; d < mla::kLatentDim; ++d) {
        // out' − out = (added weight · (v_added − out) − removed weight · (v_removed − out)) / ratio
        const double num = t2 >= 0 ? p2 * (k2[d] - o[d]) - p * (k[d] - o[d]) : mult * p * (k[d] - o[d]);
        for (std::size_t j = 0; j < bounds.size(); ++j) {
          e[j].out = std::max(e[j].out, use(num / ratio, o[d], bounds[j].atol_out, bounds[j].out->rtol));
        }
      }
    }
  }
  return e;
}

// The weakest of the per-entry effects: the bound a bug comes closest to hiding under.
Effect weakest(const std::vector<Effect>& es) {
  Effect w = es.front();
  for (const auto& e : es)
    if (e.worst() < w.worst()) w = e;
  return w;
}

// `got` (the fp64 reference on perturbed inputs) judged by judge_attention against the case's
// truth as a result of each of `bounds`' output dtypes; the weakest effect is returned.
Effect judged(const AttnCase& c, const std::vector<Bounds>& bounds, const mla::AttnOutputs& got) {
  mla::AttentionTruth truth;
  truth.out = c.truth_out;
  truth.lse = c.truth_lse;
  std::vector<Effect> es;
  for (const auto& b : bounds) {
    const mla::AttnOutputs as{b.dtype, got.out, got.lse};
    const mla::AttentionJudgement j = mla::judge_attention(c.shape, mla::Declaration{b.dtype}, as, truth);
    Effect e;
    if (j.out.nan_mismatch > 0 || j.lse.nan_mismatch > 0) {
      e.note = "NaN (a poisoned slot was read)";
      EXPECT_FALSE(j.pass());
    } else {
      e.out = j.out.max_bound_use;
      e.lse = j.lse.max_bound_use;
      // The judge must call it a failure wherever the effect says so.
      if (std::max(e.out, e.lse) > 1) EXPECT_FALSE(j.pass());
    }
    es.push_back(e);
  }
  return weakest(es);
}

// The fp64 reference on the case's inputs with another block table and/or lengths, judged.
Effect recomputed(const AttnCase& c, const std::vector<Bounds>& bounds, const std::vector<int32_t>& block_table,
                  const std::vector<int32_t>& seqlens) {
  mla::AttnInputs in = c.inputs();
  in.block_table = block_table;
  in.cache_seqlens = seqlens;
  mla::ref::AttnResult r;
  try {
    r = mla::ref::attention_fp64(in);
  } catch (const mla::Error& err) {
    Effect e;
    e.note = std::string("outside kv_cache: ") + err.what();
    return e;
  }
  return judged(c, bounds, mla::AttnOutputs{mla::OutDType::f64, std::move(r.out), std::move(r.lse)});
}

// The case run by the fault kernel that never attends the last token of a sequence, judged.
Effect dropped_last(const AttnCase& c, const std::vector<Bounds>& bounds) {
  const auto kernel = mla::faults::make("dropped_last");
  auto run = kernel->prepare(c.inputs());
  run->run();
  run->synchronize();
  return judged(c, bounds, run->results());
}

std::string fmt_effect(const Effect& e) {
  return e.detected_otherwise() ? e.note.substr(0, 60) : fmt::format("{:.3g} (out {:.3g}, lse {:.3g})", e.worst(), e.out, e.lse);
}

class Needles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    catalog_ = mla::testing::open_goldens(why);
    if (!catalog_) GTEST_SKIP() << why;
  }
  std::optional<mla::golden::Catalog> catalog_;
};

TEST_F(Needles, EveryBugOnEveryLongCaseIsFarOutsideTolerance) {
  int long_cases = 0;
  std::string report;
  // A case can hold a 16K-token sequence only if its block table reaches that far.
  const auto refs = mla::testing::attention_cases(*catalog_, [](const mla::golden::AttnHeader& h) {
    return int64_t{h.shape.max_blocks} * h.shape.page_size >= kLong;
  });
  for (const auto& ref : refs) {
    const std::string& family = ref.family;
    const std::string& name = ref.name;
    const AttnCase c = mla::golden::load_attn_case(catalog_->file(ref.file), name);
    const auto& s = c.shape;
    if (*std::max_element(c.cache_seqlens.begin(), c.cache_seqlens.end()) < kLong) continue;
    SCOPED_TRACE(family + "/" + name);
    ++long_cases;
    ASSERT_FALSE(c.needle_positions.empty()) << "a long case without needles";
    ASSERT_EQ(s.topk, 0) << "the closed forms below are for dense attention";
    // Every output dtype's entries: a bug must stand out under each (the loosest decides).
    const std::vector<Bounds> bounds{bounds_for(c, mla::OutDType::bf16), bounds_for(c, mla::OutDType::f32),
                                     bounds_for(c, mla::OutDType::f64)};
    const auto q = widened_q(c);
    std::map<std::string, Effect> worst;  // per bug: the weakest needle / sequence
    auto keep_min = [&](const std::string& bug, const Effect& e) {
      auto it = worst.find(bug);
      if (it == worst.end() || e.worst() < it->second.worst()) worst[bug] = e;
    };
    // Single needles: dropped, duplicated, read as their neighbour.
    const std::size_t n = c.needle_positions.size() / 2;
    for (std::size_t k = 0; k < n; ++k) {
      const int64_t seq = c.needle_positions[2 * k], t = c.needle_positions[2 * k + 1];
      const int64_t L = c.cache_seqlens[static_cast<std::size_t>(seq)];
      const Effect drop = weakest(closed_form(c, q, bounds, seq, t, -1, -1));
      const Effect dup = weakest(closed_form(c, q, bounds, seq, t, +1, -1));
      const Effect mis = weakest(closed_form(c, q, bounds, seq, t, 0, t + 1 < L ? t + 1 : t - 1));
      keep_min("drop a needle", drop);
      keep_min("duplicate a needle", dup);
      keep_min("misread a needle", mis);
      if (drop.worst() < kRequired || dup.worst() < kRequired || mis.worst() < kRequired) {
        ADD_FAILURE() << fmt::format("needle ({}, {}): drop {}, duplicate {}, misread {}", seq, t, fmt_effect(drop),
                                     fmt_effect(dup), fmt_effect(mis));
      }
    }
    // The other purpose of a long case: errors away from the needles must still show. The
    // needles take their own heads (even ones) whole; in every odd (background) head they are
    // ordinary tokens with logit 0, and the random tokens keep almost all of the weight.
    double most_needle_weight = 0;
    if (s.heads > 1) {
      std::vector<double> w(static_cast<std::size_t>(s.batch * s.heads), 0.0);
      for (std::size_t k = 0; k < n; ++k) {
        const int64_t seq = c.needle_positions[2 * k], t = c.needle_positions[2 * k + 1];
        const auto tok = token(c, seq, t);
        for (int64_t h = 1; h < s.heads; h += 2) {
          const double lse = c.truth_lse[static_cast<std::size_t>((seq * s.heads + h) * s.s_q)];
          w[static_cast<std::size_t>(seq * s.heads + h)] += std::exp(logit(c, q, seq, 0, h, tok) - lse);
        }
      }
      most_needle_weight = *std::max_element(w.begin(), w.end());
      EXPECT_LT(most_needle_weight, 0.05) << "needles dominate a background head";
      report += fmt::format("[needles] {}/{} background heads: needles carry at most {:.2g} of the weight\n",
                            family, name, most_needle_weight);
    }
    // Whole-case bugs through the reference.
    const Effect last = dropped_last(c, bounds);
    keep_min("drop the last token", last);
    // The closed form agrees with the recomputation (the last token of a one-sequence case).
    if (c.shape.batch == 1) {
      const Effect cf = weakest(closed_form(c, q, bounds, 0, c.cache_seqlens[0] - 1, -1, -1));
      EXPECT_NEAR(cf.worst(), last.worst(), 1e-6 * last.worst());
    }
    for (int64_t i = 0; i < s.batch; ++i) {
      auto sl = c.cache_seqlens;
      ++sl[static_cast<std::size_t>(i)];
      keep_min(fmt::format("read one past the end of sequence {}", i), recomputed(c, bounds, c.block_table, sl));
    }
    std::vector<int32_t> contiguous(c.block_table.size(), c.sentinel_block_id);
    int32_t next = 0;
    for (int64_t i = 0; i < s.batch; ++i) {
      const int64_t pages = (c.cache_seqlens[static_cast<std::size_t>(i)] + s.page_size - 1) / s.page_size;
      for (int64_t j = 0; j < pages; ++j) contiguous[static_cast<std::size_t>(i * s.max_blocks + j)] = next++;
    }
    keep_min("ignore the block table", recomputed(c, bounds, contiguous, c.cache_seqlens));
    for (const auto& [bug, e] : worst) {
      EXPECT_GE(e.worst(), kRequired) << bug << ": " << fmt_effect(e);
      report += fmt::format("[needles] {}/{} {}: {}\n", family, name, bug, fmt_effect(e));
      RecordProperty(name + " " + bug, fmt_effect(e));
    }
  }
  std::cerr << report;
  EXPECT_GE(long_cases, 3) << "long_32k, long_65537 and long_128k";
}

}  // namespace
