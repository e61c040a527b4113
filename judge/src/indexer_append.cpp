#include "mla/judge/indexer_append.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <bit>
#include <functional>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/ref/indexer_append.hpp"

namespace mla {
namespace {

using tol::Verdict;

float read_f32(const uint8_t* p) {
  float x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

// What the judge works from: the call, the oracle's cache, and which token owns each slot.
struct Ctx {
  const IndexerAppendInputs& in;
  IndexerScaleOp op;
  std::span<const uint8_t> after;
  std::vector<uint8_t> expected;
  std::vector<int64_t> owner;  // slot -> the token written there, -1 for none
  int64_t bs = 0;

  std::string where(int64_t slot) const {
    return fmt::format("slot {} (block {}, offset {})", slot, slot / bs, slot % bs);
  }
  std::span<const uint16_t> key(int64_t t) const {
    return in.keys.subspan(static_cast<std::size_t>(t * kIndexerHeadDim), static_cast<std::size_t>(kIndexerHeadDim));
  }
  double amax(int64_t t) const {
    double a = 0;
    for (const uint16_t b : key(t)) a = std::max(a, std::fabs(static_cast<double>(bf16_to_float(b))));
    return a;
  }
};

// The cache as a writer that stores each token's scale right after its codes would leave it.
std::vector<uint8_t> interleaved_image(const Ctx& c) {
  std::vector<uint8_t> img(c.in.cache.begin(), c.in.cache.end());
  for (int64_t t = 0; t < c.in.shape.num_tokens; ++t) {
    const int64_t slot = c.in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot < 0) continue;
    const auto q = ref::indexer_quantize_key(c.key(t), c.in.shape.scale_fmt, c.op);
    std::memcpy(img.data() + slot * kIndexerTokenBytes, q.codes.data(), q.codes.size());
    std::memcpy(img.data() + slot * kIndexerTokenBytes + kIndexerHeadDim, &q.scale, sizeof(float));
  }
  return img;
}

// The other recipes a kernel may write instead of the declared one, as messages name them.
struct Recipe {
  std::string name;
  std::function<float(double)> scale;
};
std::vector<Recipe> other_recipes(ScaleFmt fmt, IndexerScaleOp op) {
  std::vector<Recipe> r;
  for (const ScaleFmt f : {ScaleFmt::fp32, ScaleFmt::ue8m0}) {
    for (const IndexerScaleOp o : {IndexerScaleOp::divide, IndexerScaleOp::times_reciprocal}) {
      if (f == fmt && o == op) continue;
      r.push_back({fmt::format("{} scales, {} ({})", to_string(f), to_string(o), indexer_recipe_formula(f, o)),
                   [f, o](double a) { return indexer_key_scale(a, f, o); }});
    }
    r.push_back({fmt::format("the MLA cache writer's {} scales (max(amax / 448, 1e-4): clamp after dividing)", to_string(f)),
                 [f](double a) { return fp8_block_scale(a, f, Fp8Recipe::flashmla); }});
  }
  return r;
}

void judge_scales(const Ctx& c, IndexerAppendJudgement& j) {
  const auto others = other_recipes(c.in.shape.scale_fmt, c.op);
  std::vector<int64_t> fits(others.size(), 0);
  std::string first;
  for (int64_t t = 0; t < c.in.shape.num_tokens; ++t) {
    const int64_t slot = c.in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot < 0) continue;
    const int64_t at = indexer_scale_offset(c.bs, slot);
    if (std::memcmp(c.after.data() + at, c.expected.data() + at, sizeof(float)) == 0) continue;
    const float got = read_f32(c.after.data() + at), want = read_f32(c.expected.data() + at);
    const double amax = c.amax(t);
    if (j.wrong_scales++ == 0) {
      first = fmt::format("token {} ({}) at byte offset {}: amax {:.9g}, expected {:.9g} (0x{:08x}), got {:.9g} (0x{:08x})",
                          t, c.where(slot), at, amax, want, std::bit_cast<uint32_t>(want), got,
                          std::bit_cast<uint32_t>(got));
    }
    for (std::size_t r = 0; r < others.size(); ++r) {
      if (std::bit_cast<uint32_t>(others[r].scale(amax)) == std::bit_cast<uint32_t>(got)) ++fits[r];
    }
  }
  if (!j.wrong_scales) return;
  j.reasons.push_back(fmt::format("scales: {} token{} not stored with the declared recipe, {}; first {}", j.wrong_scales,
                                  j.wrong_scales == 1 ? "'s scale is" : "s' scales are",
                                  indexer_recipe_formula(c.in.shape.scale_fmt, c.op), first));
  for (std::size_t r = 0; r < others.size(); ++r) {
    if (fits[r] == j.wrong_scales) {
      j.reasons.push_back(fmt::format("scales: every wrong scale is {}: the kernel writes that, not the declared {} "
                                      "scales ({})",
                                      others[r].name, to_string(c.in.shape.scale_fmt), to_string(c.op)));
      break;
    }
  }
}

void judge_codes(const Ctx& c, IndexerAppendJudgement& j) {
  int64_t neighbours = 0, judged = 0;  // judged: wrong codes of tokens whose scale is right
  std::string first;
  for (int64_t t = 0; t < c.in.shape.num_tokens; ++t) {
    const int64_t slot = c.in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot < 0) continue;
    const int64_t base = indexer_code_offset(c.bs, slot), s_at = indexer_scale_offset(c.bs, slot);
    const bool scale_right = std::memcmp(c.after.data() + s_at, c.expected.data() + s_at, sizeof(float)) == 0;
    const float scale = read_f32(c.expected.data() + s_at);
    for (int64_t d = 0; d < kIndexerHeadDim; ++d) {
      const uint8_t got = c.after[static_cast<std::size_t>(base + d)], want = c.expected[static_cast<std::size_t>(base + d)];
      if (got == want) continue;
      const float k = bf16_to_float(c.key(t)[static_cast<std::size_t>(d)]);
      if (j.wrong_code_bytes++ == 0) {
        first = fmt::format("token {} ({}) dim {} at byte offset {}: k {:.9g} / scale {:.9g}, expected 0x{:02x} ({:.6g}), "
                            "got 0x{:02x} ({:.6g})",
                            t, c.where(slot), d, base + d, k, scale, want, e4m3_to_double(want), got, e4m3_to_double(got));
      }
      if (!scale_right) continue;
      ++judged;
      // The other e4m3 neighbour of the float32 quotient: same sign, adjacent magnitude code, and
      // the quotient between the two values.
      const double q = k / scale, g = e4m3_to_double(got), w = e4m3_to_double(want);
      const bool adjacent = (got & 0x80) == (want & 0x80) && std::abs((got & 0x7F) - (want & 0x7F)) == 1;
      if (adjacent && !std::isnan(g) && std::min(g, w) <= q && q <= std::max(g, w)) ++neighbours;
    }
  }
  if (!j.wrong_code_bytes) return;
  j.reasons.push_back(fmt::format("codes: {} e4m3 code byte{} not the oracle's (round to nearest even of float32(k / "
                                  "scale), saturating at 448); first {}",
                                  j.wrong_code_bytes, j.wrong_code_bytes == 1 ? " is" : "s are", first));
  if (judged > 0 && neighbours == judged) {
    j.reasons.push_back(fmt::format("codes: every wrong code ({}) is the other e4m3 neighbour of k / scale: the kernel "
                                    "does not round to nearest even",
                                    judged));
  }
}

// A skipped token whose codes sit in `slot`, or -1.
int64_t skipped_token_in(const Ctx& c, int64_t slot) {
  const int64_t at = indexer_code_offset(c.bs, slot);
  for (int64_t t = 0; t < c.in.shape.num_tokens; ++t) {
    if (c.in.slot_mapping[static_cast<std::size_t>(t)] >= 0) continue;
    const auto q = ref::indexer_quantize_key(c.key(t), c.in.shape.scale_fmt, c.op);
    if (std::memcmp(c.after.data() + at, q.codes.data(), q.codes.size()) == 0) return t;
  }
  return -1;
}

// `diagnose`: name a skipped token or a neighbour's overrun when one explains a changed slot (not
// when the layout already explains every byte).
void judge_untouched(const Ctx& c, IndexerAppendJudgement& j, bool diagnose) {
  std::vector<int64_t> slots;  // changed slots no token owns, in cache order
  std::string first;
  for (std::size_t i = 0; i < c.after.size(); ++i) {
    if (c.after[i] == c.expected[i]) continue;
    const IndexerByte b = indexer_byte_at(c.bs, static_cast<int64_t>(i));
    if (c.owner[static_cast<std::size_t>(b.slot)] >= 0) continue;  // a written token's byte: codes or scales
    if (j.changed_untouched_bytes++ == 0) {
      first = fmt::format("{} {} {} at byte offset {}: prior 0x{:02x}, got 0x{:02x}", c.where(b.slot),
                          b.scale ? "scale byte" : "code dim", b.dim, i, c.in.cache[i], c.after[i]);
    }
    if (slots.empty() || slots.back() != b.slot) slots.push_back(b.slot);
  }
  if (!j.changed_untouched_bytes) return;
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  j.reasons.push_back(fmt::format("untouched: {} byte{} of {} slot{} no token maps to changed (they must keep their prior "
                                  "bytes); first {}",
                                  j.changed_untouched_bytes, j.changed_untouched_bytes == 1 ? "" : "s", slots.size(),
                                  slots.size() == 1 ? "" : "s", first));
  if (!diagnose) return;
  const int64_t n_slots = static_cast<int64_t>(c.owner.size());
  for (std::size_t i = 0; i < std::min<std::size_t>(slots.size(), 16); ++i) {
    const int64_t s = slots[i];
    if (const int64_t t = skipped_token_in(c, s); t >= 0) {
      j.reasons.push_back(fmt::format("untouched: {} holds the codes of skipped token {} (slot_mapping[{}] = {}): a slot "
                                      "< 0 must write nothing",
                                      c.where(s), t, t, c.in.slot_mapping[static_cast<std::size_t>(t)]));
      return;
    }
    for (const int64_t u : {s - 1, s + 1}) {
      if (u >= 0 && u < n_slots && c.owner[static_cast<std::size_t>(u)] >= 0) {
        j.reasons.push_back(fmt::format("untouched: {} is next to token {}'s {}: a write past the token's own slot",
                                        c.where(s), c.owner[static_cast<std::size_t>(u)], c.where(u)));
        return;
      }
    }
  }
}

// The written slots' values against the oracle's, for the judgement's record (the byte rules above
// are the verdict's; these say how far off the values are).
void compare_values(const Ctx& c, IndexerAppendJudgement& j) {
  std::vector<double> got_codes, want_codes, got_scales, want_scales;
  for (int64_t t = 0; t < c.in.shape.num_tokens; ++t) {
    const int64_t slot = c.in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot < 0) continue;
    const int64_t base = indexer_code_offset(c.bs, slot), s_at = indexer_scale_offset(c.bs, slot);
    for (int64_t d = 0; d < kIndexerHeadDim; ++d) {
      got_codes.push_back(e4m3_to_double(c.after[static_cast<std::size_t>(base + d)]));
      want_codes.push_back(e4m3_to_double(c.expected[static_cast<std::size_t>(base + d)]));
    }
    got_scales.push_back(read_f32(c.after.data() + s_at));
    want_scales.push_back(read_f32(c.expected.data() + s_at));
  }
  const int64_t w = static_cast<int64_t>(got_scales.size());
  const std::vector<int64_t> code_shape{w, kIndexerHeadDim}, scale_shape{w};
  j.codes = tol::judge("codes", got_codes, want_codes, code_shape, tol::lookup("indexer.append.codes"));
  j.scales = tol::judge("scales", got_scales, want_scales, scale_shape, tol::lookup("indexer.append.scales"));
}

}  // namespace

IndexerAppendJudgement judge_indexer_append(const IndexerAppendInputs& in, IndexerScaleOp op,
                                            std::span<const uint8_t> after) {
  IndexerAppendJudgement j;
  Ctx c{in, op, after, ref::indexer_append_reference(in, op), {}, in.shape.block_size};
  if (after.size() != in.cache.size()) {
    j.verdict = Verdict::fail;
    j.reasons.push_back(fmt::format("the call returned a cache of {} bytes, expected {} (num_blocks {} x block_size {} x "
                                    "{})",
                                    after.size(), in.cache.size(), in.shape.num_blocks, in.shape.block_size,
                                    kIndexerTokenBytes));
    return j;
  }
  c.owner.assign(static_cast<std::size_t>(in.shape.num_blocks * in.shape.block_size), -1);
  for (int64_t t = 0; t < in.shape.num_tokens; ++t) {
    const int64_t slot = in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot >= 0) c.owner[static_cast<std::size_t>(slot)] = t;
  }
  compare_values(c, j);
  if (std::equal(after.begin(), after.end(), c.expected.begin())) {
    j.verdict = Verdict::pass;
    return j;
  }
  // Named first: when it is the bug, every other reason below is its consequence.
  bool interleaved = false;
  if (c.bs > 1) {
    const auto img = interleaved_image(c);
    interleaved = std::equal(after.begin(), after.end(), img.begin(), img.end());
  }
  if (interleaved) {
    j.reasons.push_back(fmt::format("layout: each token's scale is stored right after its 128 codes (token bytes at "
                                    "slot * {}); the cache keeps a block's {} x 128 codes first, then its {} scales",
                                    kIndexerTokenBytes, c.bs, c.bs));
  }
  judge_scales(c, j);
  judge_codes(c, j);
  judge_untouched(c, j, !interleaved);
  j.verdict = Verdict::fail;
  return j;
}

}  // namespace mla
