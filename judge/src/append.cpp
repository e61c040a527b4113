#include "mla/judge/append.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

namespace mla {
namespace {

using tol::Verdict;
constexpr int64_t kLat = static_cast<int64_t>(kLatentDim), kRp = static_cast<int64_t>(kRopeDim),
                  kTok = static_cast<int64_t>(kQkDim);

// The recipes' formulas as messages name them (mla/core/numeric.hpp, Fp8Recipe).
const char* recipe_formula(Fp8Recipe r) {
  return r == Fp8Recipe::flashmla ? "max(amax / 448, 1e-4)" : "max(amax, 1e-4) / 448";
}

bool is_power_of_two(float s) {
  int e = 0;
  return std::isfinite(s) && s > 0 && std::frexp(s, &e) == 0.5f;
}

// The latent and k_pe each token left in its slot, as values.
void stored_values(const ref::AppendProblem& p, std::span<const uint8_t> after, const std::vector<int64_t>& slots,
                   std::vector<double>& lat, std::vector<double>& pe) {
  const std::size_t bpt = cache_bytes_per_token(p.format);
  const int64_t n = p.num_tokens;
  lat.assign(static_cast<std::size_t>(n * kLat), 0.0);
  pe.assign(static_cast<std::size_t>(n * kRp), 0.0);
  std::vector<double> token(static_cast<std::size_t>(kTok));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* t = after.data() + slots[static_cast<std::size_t>(i)] * static_cast<int64_t>(bpt);
    if (p.format == CacheFormat::bf16) {
      for (int64_t j = 0; j < kTok; ++j) {
        uint16_t b;
        std::memcpy(&b, t + 2 * j, 2);
        token[static_cast<std::size_t>(j)] = bf16_to_float(b);
      }
    } else {
      fp8_dequantize_token({t, bpt}, token);
    }
    std::copy(token.begin(), token.begin() + kLat, lat.begin() + i * kLat);
    std::copy(token.begin() + kLat, token.end(), pe.begin() + i * kRp);
  }
}

// k_pe rotated the classic wrong way: pairs (i, i + 32) instead of (2i, 2i+1).
std::vector<double> half_split_rope(const ref::AppendProblem& p) {
  const int64_t n = p.num_tokens;
  std::vector<double> half(static_cast<std::size_t>(n * kRp));
  for (int64_t i = 0; i < n; ++i) {
    const double pos = p.positions[static_cast<std::size_t>(i)];
    for (int64_t j = 0; j < kRp / 2; ++j) {
      const double a = pos * p.inv_freq[static_cast<std::size_t>(j)];
      const double x0 = p.k_pe[static_cast<std::size_t>(i * kRp + j)];
      const double x1 = p.k_pe[static_cast<std::size_t>(i * kRp + j + kRp / 2)];
      half[static_cast<std::size_t>(i * kRp + j)] = x0 * std::cos(a) - x1 * std::sin(a);
      half[static_cast<std::size_t>(i * kRp + j + kRp / 2)] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  }
  return half;
}

// The FP8 consistency rule of the header, appended to `reasons`.
void judge_fp8_encoding(const ref::AppendProblem& p, std::span<const uint8_t> after, const std::vector<int64_t>& slots,
                        const std::vector<double>& values, const tol::Tolerance& bf16_tol,
                        std::vector<std::string>& reasons) {
  const std::size_t bpt = cache_bytes_per_token(p.format);
  // RMSNorm is a scaling, so the latent's legitimate error is relative only: the entry's rtol.
  // (Its absolute terms exist for RoPE pairs that cancel, which the latent has not.)
  auto band = [&](double v) { return bf16_tol.rtol * std::fabs(v); };
  int64_t bad_scales = 0, bad_codes = 0, other_fits = 0;
  std::string first_scale, first_code;
  // The recipe the implementation did not declare: when every wrong scale is that one's, say so.
  const Fp8Recipe other = p.fp8_recipe == Fp8Recipe::deepseek_v32 ? Fp8Recipe::flashmla : Fp8Recipe::deepseek_v32;
  for (int64_t i = 0; i < p.num_tokens; ++i) {
    const uint8_t* t8 = after.data() + slots[static_cast<std::size_t>(i)] * static_cast<int64_t>(bpt);
    const double* t = values.data() + i * kTok;
    for (int64_t b = 0; b < kLat / 128; ++b) {
      float s;
      std::memcpy(&s, t8 + kLat + 4 * b, 4);
      double lo = 0, hi = 0;
      for (int64_t j = b * 128; j < (b + 1) * 128; ++j) {
        lo = std::max(lo, std::fabs(t[j]) - band(t[j]));
        hi = std::max(hi, std::fabs(t[j]) + band(t[j]));
      }
      auto allows = [&](Fp8Recipe r) {
        const float s_lo = fp8_block_scale(lo, p.scale_fmt, r), s_hi = fp8_block_scale(hi, p.scale_fmt, r);
        return std::isfinite(s) && s >= s_lo && s <= s_hi && (p.scale_fmt == ScaleFmt::fp32 || is_power_of_two(s));
      };
      if (!allows(p.fp8_recipe)) {
        if (bad_scales++ == 0) {
          first_scale = fmt::format("token {} block {}: scale {:.9g}, the {} recipe ({} scales) allows [{:.9g}, {:.9g}]", i,
                                    b, s, to_string(p.fp8_recipe), to_string(p.scale_fmt),
                                    fp8_block_scale(lo, p.scale_fmt, p.fp8_recipe),
                                    fp8_block_scale(hi, p.scale_fmt, p.fp8_recipe));
        }
        if (allows(other)) ++other_fits;
        continue;  // codes are judged against a sound scale only
      }
      for (int64_t j = b * 128; j < (b + 1) * 128; ++j) {
        const double got = e4m3_to_double(t8[j]);
        const double a = e4m3_to_double(e4m3_from_double((t[j] - band(t[j])) / s));
        const double z = e4m3_to_double(e4m3_from_double((t[j] + band(t[j])) / s));
        if (!(got >= a && got <= z) && bad_codes++ == 0) {
          first_code = fmt::format("[{}, {}]: code 0x{:02x} = {:.6g}, the encodings of the band allow [{:.6g}, {:.6g}]", i,
                                   j, t8[j], got, a, z);
        }
      }
    }
  }
  if (bad_scales) {
    reasons.push_back(fmt::format("fp8 scales: {} block scale{} not the declared {} recipe's {}{} of the block; first {}",
                                  bad_scales, bad_scales == 1 ? " is" : "s are", to_string(p.fp8_recipe),
                                  recipe_formula(p.fp8_recipe),
                                  p.scale_fmt == ScaleFmt::ue8m0 ? " rounded up to a power of two" : "", first_scale));
    if (other_fits == bad_scales) {
      reasons.push_back(fmt::format("fp8 scales: every one of them is the {} recipe's {}: the kernel writes {}, not the {} "
                                    "it declares",
                                    to_string(other), recipe_formula(other), to_string(other), to_string(p.fp8_recipe)));
    }
  }
  if (bad_codes) {
    reasons.push_back(fmt::format("fp8 codes: {} e4m3 code{} not the round-to-nearest-even encoding of the value with "
                                  "the block's scale; first {}",
                                  bad_codes, bad_codes == 1 ? " is" : "s are", first_code));
  }
}

}  // namespace

AppendJudgement judge_append(const ref::AppendProblem& p, std::span<const uint8_t> before,
                             std::span<const uint8_t> after, const AppendCall& call) {
  AppendJudgement r;
  const std::size_t bpt = cache_bytes_per_token(p.format);
  const int64_t n_slots = p.num_blocks * p.page_size;
  if (before.size() != static_cast<std::size_t>(n_slots) * bpt) {
    throw Error(fmt::format("judge_append: the cache before the call has {} bytes, the problem needs {}", before.size(),
                            static_cast<std::size_t>(n_slots) * bpt));
  }
  if (after.size() != before.size()) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("the call returned a cache of {} bytes, expected {}", after.size(), before.size()));
    return r;
  }
  const auto rejected = ref::first_token_past_capacity(p);
  const std::string msg = call.message.empty() ? "" : ": " + call.message;
  if (call.status == AppendStatus::refused) {
    r.verdict = Verdict::unsupported;
    r.reasons.push_back(fmt::format("the append refused the call (it claims {}){}", to_string(p.format), msg));
    return r;
  }
  if (call.status == AppendStatus::error && !rejected) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("append returned {}{}", call.status_word, msg));
    return r;
  }
  auto slot_changed = [&](int64_t s) {
    return std::memcmp(after.data() + s * static_cast<int64_t>(bpt), before.data() + s * static_cast<int64_t>(bpt), bpt) != 0;
  };
  auto where = [&](int64_t s) { return fmt::format("slot {} (block {}, offset {})", s, s / p.page_size, s % p.page_size); };

  if (rejected) {
    const int64_t t = *rejected;
    const auto pos = p.positions[static_cast<std::size_t>(t)];
    if (call.status == AppendStatus::ok) {
      r.reasons.push_back(fmt::format("capacity: accepted token {} of sequence {} at position {} >= max_seq_len {}; it "
                                      "must return MLA_PLUGIN_CAPACITY",
                                      t, p.seq_ids[static_cast<std::size_t>(t)], pos, p.max_seq_len));
    } else if (call.status != AppendStatus::capacity) {
      r.reasons.push_back(fmt::format("capacity: returned {} for a token at position {} >= max_seq_len {}; "
                                      "MLA_PLUGIN_CAPACITY is the code for it{}",
                                      call.status_word, pos, p.max_seq_len, msg));
    }
    int64_t changed = 0, first = -1;
    for (int64_t s = 0; s < n_slots; ++s) {
      if (slot_changed(s) && changed++ == 0) first = s;
    }
    if (changed) {
      r.reasons.push_back(fmt::format("capacity: {} slot{} written although the call {} (nothing may be written when a "
                                      "token is past capacity); first: {}",
                                      changed, changed == 1 ? "" : "s",
                                      call.status == AppendStatus::ok ? "should have been rejected" : "was rejected",
                                      where(first)));
    }
  } else {
    if (call.status == AppendStatus::capacity) {
      r.reasons.push_back(fmt::format("capacity: returned MLA_PLUGIN_CAPACITY for tokens all within max_seq_len {}{}",
                                      p.max_seq_len, msg));
    }
    const std::vector<int64_t> slots = ref::append_slots(p);
    // Slots no token maps to keep every byte.
    const std::set<int64_t> written(slots.begin(), slots.end());
    int64_t changed = 0, first = -1;
    for (int64_t s = 0; s < n_slots; ++s) {
      if (!written.count(s) && slot_changed(s) && changed++ == 0) first = s;
    }
    if (changed) {
      r.reasons.push_back(fmt::format("untouched slots: {} slot{} no token maps to changed; first: {}", changed,
                                      changed == 1 ? "" : "s", where(first)));
    }
    if (call.status == AppendStatus::ok) {
      const std::vector<double> values = ref::append_values_f64(p);
      const int64_t n = p.num_tokens;
      std::vector<double> lat, pe, lat_truth(static_cast<std::size_t>(n * kLat)), pe_truth(static_cast<std::size_t>(n * kRp));
      stored_values(p, after, slots, lat, pe);
      for (int64_t i = 0; i < n; ++i) {
        const double* t = values.data() + i * kTok;
        std::copy(t, t + kLat, lat_truth.begin() + i * kLat);
        std::copy(t + kLat, t + kTok, pe_truth.begin() + i * kRp);
      }
      const std::vector<int64_t> lat_shape{n, kLat}, pe_shape{n, kRp};
      const auto& bf16_tol = tol::lookup("cache.append.bf16");
      r.latent = tol::judge("latent", lat, lat_truth, lat_shape,
                            p.format == CacheFormat::fp8 ? tol::lookup("cache.append.fp8.dequant") : bf16_tol);
      r.k_pe = tol::judge("k_pe", pe, pe_truth, pe_shape, bf16_tol);
      for (const auto& why : r.latent->reasons) r.reasons.push_back("latent (kv_norm): " + why);
      if (!r.k_pe->reasons.empty()) {
        // Name the classic RoPE bug when it is the one.
        if (tol::judge("k_pe", pe, half_split_rope(p), pe_shape, bf16_tol).verdict == Verdict::pass) {
          r.reasons.push_back("k_pe (RoPE): matches a half-split RoPE rotating pairs (i, i+32); DeepSeek rotates "
                              "interleaved pairs (2i, 2i+1)");
        }
        for (const auto& why : r.k_pe->reasons) r.reasons.push_back("k_pe (RoPE at the token's position): " + why);
      }
      if (p.format == CacheFormat::fp8) judge_fp8_encoding(p, after, slots, values, bf16_tol, r.reasons);
    }
  }
  r.verdict = r.reasons.empty() ? Verdict::pass : Verdict::fail;
  return r;
}

}  // namespace mla
