// Predictions computed from a case's own data, independently of any kernel and of the
// certifier, so a test can say which verdict a deliberately broken kernel must get.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/golden/golden.hpp"

namespace mla::certify::testing {

struct Prediction {
  bool must_fail = false;  // clearly beyond the tolerance (or a row becomes empty)
  bool must_pass = false;  // clearly within it (nothing the kernel drops carries weight)
  std::string why;
};

// Dropping token L-1 from a row whose softmax gives it weight p turns out into
// (out - p·v)/(1 - p), i.e. moves it by p·(out - v)/(1 - p), and lse by log(1 - p); a row whose
// only token it was becomes empty (out 0, lse +inf). p = exp(scale·q·k - lse) from the truth.
inline Prediction predict_dropped_last(const mla::golden::AttnCase& c, mla::OutDType dtype) {
  const auto& s = c.shape;
  const auto& out_tol = mla::tol::tolerance_for(dtype, s.cache_format, "out");
  const auto& lse_tol = mla::tol::tolerance_for(dtype, s.cache_format, "lse");
  const int64_t D = 576, Dv = 512;
  double max_use = 0, sum_d2 = 0, sum_sq = 0;
  int64_t emptied = 0, dominated = 0, affected_rows = 0;
  // Weight of the dropped token above which its row is treated as replaced, not perturbed.
  constexpr double kDominant = 1e-6;
  for (double x : c.truth_out) sum_sq += 2 * x * x;

  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t L = c.cache_seqlens[b];
    if (L == 0) continue;
    const int64_t t = L - 1;
    const int64_t blk = c.block_table[b * s.max_blocks + t / s.page_size];
    const int64_t slot = blk * s.page_size + t % s.page_size;
    std::vector<double> k(D);
    if (s.cache_format == mla::CacheFormat::fp8) {
      for (int64_t d = 0; d < D; ++d) k[d] = c.kv_cache_dequant[slot * D + d];
    } else {
      for (int64_t d = 0; d < D; ++d) {
        uint16_t bits;
        std::memcpy(&bits, c.kv_cache.data() + (slot * D + d) * 2, 2);
        k[d] = mla::bf16_to_float(bits);
      }
    }
    for (int64_t sq = 0; sq < s.s_q; ++sq) {
      int64_t attended = 0;  // tokens row (b, sq) attends
      bool has_last = false;
      if (s.topk == 0) {
        const int64_t last = s.causal ? std::min(L - s.s_q + sq, L - 1) : L - 1;
        attended = std::max<int64_t>(last + 1, 0);
        has_last = last == t;
      } else {
        for (int64_t j = 0; j < s.topk; ++j) {
          const int32_t idx = c.indices[(b * s.s_q + sq) * s.topk + j];
          if (idx >= 0 && idx < L) {
            ++attended;
            has_last = has_last || idx == t;
          }
        }
      }
      if (!has_last) continue;
      ++affected_rows;
      if (attended == 1) {
        emptied += s.heads;
        continue;
      }
      for (int64_t h = 0; h < s.heads; ++h) {
        const uint16_t* q = c.q.data() + ((b * s.s_q + sq) * s.heads + h) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(mla::bf16_to_float(q[d])) * k[d];
        const double lse = c.truth_lse[(b * s.heads + h) * s.s_q + sq];
        const double p = std::exp(c.softmax_scale * dot - lse);
        if (1 - p < kDominant) {
          // The dropped token carries (almost) all the weight: the row's answer becomes another
          // token's value, and the formula below would divide by ~0.
          ++dominated;
          continue;
        }
        const double* out = c.truth_out.data() + ((b * s.s_q + sq) * s.heads + h) * Dv;
        for (int64_t d = 0; d < Dv; ++d) {
          const double delta = p * (out[d] - k[d]) / (1 - p);
          sum_d2 += delta * delta;
          max_use = std::max(max_use, std::fabs(delta) / std::max(out_tol.atol, out_tol.rtol * std::fabs(out[d])));
        }
        const double dlse = std::log1p(-p);
        max_use = std::max(max_use, std::fabs(dlse) / std::max(lse_tol.atol, lse_tol.rtol * std::fabs(lse)));
      }
    }
  }
  const double cos = sum_sq > 0 ? sum_d2 / sum_sq : (sum_d2 > 0 ? 1.0 : 0.0);
  Prediction p;
  // Factor-2 bands keep the prediction's own rounding from deciding a borderline case.
  p.must_fail = emptied > 0 || dominated > 0 || max_use > 2 || cos > 2 * out_tol.cos_diff;
  p.must_pass = emptied == 0 && dominated == 0 && max_use < 0.5 && cos < 0.5 * out_tol.cos_diff;
  p.why = fmt::format("{} affected rows, {} heads emptied, {} dominated by the dropped token, predicted bound use "
                      "{:.3g}, cos diff {:.3g}",
                      affected_rows, emptied, dominated, max_use, cos);
  return p;
}

// A dense case where some sequence has L > 0 and L % page_size != 0: a kernel that also reads
// slot L (in a page the sequence owns) reads a NaN-poisoned slot (fixtures/SCHEMA.md) into the
// last query's softmax, so its row becomes NaN.
inline bool has_poisoned_slot_in_owned_page(const mla::golden::AttnCase& c) {
  if (c.shape.topk > 0) return false;
  for (int32_t L : c.cache_seqlens) {
    if (L > 0 && L % c.shape.page_size != 0) return true;
  }
  return false;
}

inline bool has_empty_sequence(const mla::golden::AttnCase& c) {
  return std::any_of(c.cache_seqlens.begin(), c.cache_seqlens.end(), [](int32_t L) { return L == 0; });
}

// What a bug does to a case: nothing, a different result, or an access past a buffer's end.
enum class Effect { none, changes, faults };

// The positions row (b, sq) attends, in the order a kernel visits them (dense: 0 .. last;
// sparse: the valid indices as listed).
inline std::vector<int64_t> attended_positions(const mla::golden::AttnCase& c, int64_t b, int64_t sq) {
  const auto& s = c.shape;
  const int64_t L = c.cache_seqlens[b];
  std::vector<int64_t> p;
  if (s.topk == 0) {
    const int64_t last = s.causal ? std::min(L - s.s_q + sq, L - 1) : L - 1;
    for (int64_t t = 0; t <= last; ++t) p.push_back(t);
  } else {
    for (int64_t j = 0; j < s.topk; ++j) {
      const int32_t idx = c.indices[(b * s.s_q + sq) * s.topk + j];
      if (idx >= 0 && idx < L) p.push_back(idx);
    }
  }
  return p;
}

// reads_past_end: at each row's last attended token the kernel also reads the first value of
// the token stored after it in memory, times zero: a NaN there (a poisoned slot) makes the row
// NaN, and a slot past the end of the cache is an access past the buffer.
inline Effect predict_reads_past_end(const mla::golden::AttnCase& c) {
  const auto& s = c.shape;
  const int64_t token_bytes = s.cache_format == mla::CacheFormat::fp8 ? 656 : 1152;
  const int64_t slots = int64_t{s.num_blocks} * s.page_size;
  Effect e = Effect::none;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t sq = 0; sq < s.s_q; ++sq) {
      const auto p = attended_positions(c, b, sq);
      if (p.empty()) continue;
      const int64_t t = p.back();
      const int64_t slot = int64_t{c.block_table[b * s.max_blocks + t / s.page_size]} * s.page_size + t % s.page_size + 1;
      if (slot >= slots) return Effect::faults;
      const uint8_t* at = c.kv_cache.data() + slot * token_bytes;
      bool nan = false;
      if (s.cache_format == mla::CacheFormat::fp8) {
        nan = (at[0] & 0x7F) == 0x7F;
      } else {
        const uint16_t bits = static_cast<uint16_t>(at[0] | (at[1] << 8));
        nan = std::isnan(0.0 * mla::bf16_to_float(bits));
      }
      if (nan) e = Effect::changes;
    }
  }
  return e;
}

// ignores_block_table: page i of sequence b is read from block b * max_blocks + i; the result
// changes wherever a page the sequence reads is mapped elsewhere (and past the cache, faults).
inline Effect predict_ignores_block_table(const mla::golden::AttnCase& c) {
  const auto& s = c.shape;
  Effect e = Effect::none;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t sq = 0; sq < s.s_q; ++sq) {
      for (const int64_t t : attended_positions(c, b, sq)) {
        const int64_t page = t / s.page_size;
        const int64_t assumed = b * s.max_blocks + page;
        if (assumed >= s.num_blocks) return Effect::faults;
        if (c.block_table[b * s.max_blocks + page] != assumed) e = Effect::changes;
      }
    }
  }
  return e;
}

// wraps_negative_index: in a sparse row every index t < -1 with t + L >= 0 is attended as
// position t + L, once more per such entry (a row with no valid index becomes non-empty). With
// p_j = exp(scale·q·k_j - lse) from the truth, the extra tokens turn out into
// (out + Σ p_j·v_j)/(1 + Σ p_j) and lse into lse + log(1 + Σ p_j).
inline Prediction predict_wrapped_negative(const mla::golden::AttnCase& c, mla::OutDType dtype) {
  const auto& s = c.shape;
  Prediction pr;
  if (s.topk == 0) {
    pr.must_pass = true;
    pr.why = "dense";
    return pr;
  }
  const auto& out_tol = mla::tol::tolerance_for(dtype, s.cache_format, "out");
  const auto& lse_tol = mla::tol::tolerance_for(dtype, s.cache_format, "lse");
  const int64_t D = 576, Dv = 512;
  double max_use = 0, sum_d2 = 0, sum_sq = 0;
  int64_t extra = 0, filled = 0;
  for (double x : c.truth_out) sum_sq += 2 * x * x;
  auto key = [&](int64_t b, int64_t t) {
    const int64_t slot = int64_t{c.block_table[b * s.max_blocks + t / s.page_size]} * s.page_size + t % s.page_size;
    std::vector<double> k(D);
    for (int64_t d = 0; d < D; ++d) {
      if (s.cache_format == mla::CacheFormat::fp8) {
        k[d] = c.kv_cache_dequant[slot * D + d];
      } else {
        uint16_t bits;
        std::memcpy(&bits, c.kv_cache.data() + (slot * D + d) * 2, 2);
        k[d] = mla::bf16_to_float(bits);
      }
    }
    return k;
  };
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t L = c.cache_seqlens[b];
    for (int64_t sq = 0; sq < s.s_q; ++sq) {
      std::vector<int64_t> wrapped;
      for (int64_t j = 0; j < s.topk; ++j) {
        const int64_t idx = c.indices[(b * s.s_q + sq) * s.topk + j];
        if (idx < -1 && idx + L >= 0) wrapped.push_back(idx + L);
      }
      if (wrapped.empty()) continue;
      extra += static_cast<int64_t>(wrapped.size());
      for (int64_t h = 0; h < s.heads; ++h) {
        const double lse = c.truth_lse[(b * s.heads + h) * s.s_q + sq];
        if (!std::isfinite(lse)) {
          ++filled;  // an empty row now attends something
          continue;
        }
        const uint16_t* q = c.q.data() + ((b * s.s_q + sq) * s.heads + h) * D;
        double P = 0;
        std::vector<double> pv(Dv, 0.0);
        for (const int64_t t : wrapped) {
          const auto k = key(b, t);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(mla::bf16_to_float(q[d])) * k[d];
          const double p = std::exp(c.softmax_scale * dot - lse);
          P += p;
          for (int64_t d = 0; d < Dv; ++d) pv[d] += p * k[d];
        }
        const double* out = c.truth_out.data() + ((b * s.s_q + sq) * s.heads + h) * Dv;
        for (int64_t d = 0; d < Dv; ++d) {
          const double delta = (pv[d] - P * out[d]) / (1 + P);
          sum_d2 += delta * delta;
          max_use = std::max(max_use, std::fabs(delta) / std::max(out_tol.atol, out_tol.rtol * std::fabs(out[d])));
        }
        max_use = std::max(max_use, std::log1p(P) / std::max(lse_tol.atol, lse_tol.rtol * std::fabs(lse)));
      }
    }
  }
  const double cos = sum_sq > 0 ? sum_d2 / sum_sq : (sum_d2 > 0 ? 1.0 : 0.0);
  pr.must_fail = filled > 0 || max_use > 2 || cos > 2 * out_tol.cos_diff;
  pr.must_pass = extra == 0;
  pr.why = fmt::format("{} wrapped entries, {} empty heads filled, predicted bound use {:.3g}, cos diff {:.3g}", extra, filled,
                       max_use, cos);
  return pr;
}

}  // namespace mla::certify::testing
