// The top-k selections drawn at run time (family fresh, rows of file fresh_topk): per claimed k,
// two cases (rows of 2k + 97 logits, and of k/2 + 3, so that every row is shorter than k), each
// row one edge of the field, drawn from the run's seed:
//   full        the whole row valid, normal logits;
//   decode      valid up to the row's own position, its newest key the clear maximum (a kernel
//               that stops one short loses it), and larger finite logits after it: the causal
//               future a kernel that ignores the row's end would select;
//   ragged      a prefill row of DeepGEMM's ks/ke form: a range starting past 0, NaN outside it
//               (never to be read);
//   short       fewer valid positions than k (-1 padding);
//   masked      30 % of the range -inf (masked positions, never selected);
//   mostly_masked  more positions than k in the range, fewer finite ones (a kernel that fills
//               with -inf positions is caught);
//   empty       end == start, and end < start;
//   ties        every valid logit equal (any k of them is right);
//   near_ties   logits a few float32 ulps apart around 1000;
//   huge, tiny  normal logits of std 1e4 and of std 1e-30 (the judge's bound is relative).
// A kernel that claims only ranges of valid positions (TopkKernelInfo::range_all_valid, the causal
// horizon as V3.2's sparse attention calls it) gets the masked and mostly_masked rows without
// their masks: never a -inf inside a range it was given.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "kinds/topk/topk_rows.hpp"
#include "mla/core/generator.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

enum class RowKind { full, decode, ragged, short_row, masked, mostly_masked, empty, reversed, ties, near_ties, huge, tiny };
constexpr RowKind kRowKinds[] = {RowKind::full,   RowKind::decode,        RowKind::ragged, RowKind::short_row,
                                 RowKind::masked, RowKind::mostly_masked, RowKind::empty,  RowKind::reversed,
                                 RowKind::ties,   RowKind::near_ties,     RowKind::huge,   RowKind::tiny};
// Each kind twice, drawn apart.
constexpr int kRowsPerKind = 2;

// One row of a drawn case: its range and its n logits. `key` draws it.
void draw_row(RowKind kind, uint64_t key, int64_t n, int k, bool masks, std::span<float> row, int32_t& start,
              int32_t& end) {
  const auto u = [&](uint64_t i) { return gen::uniform01(key, 0, i); };
  const auto normal = [&](uint64_t i, double std) { return static_cast<float>(gen::value(key, 1, i, 0, std)); };
  // An index in [lo, hi] (hi >= lo).
  const auto pick = [&](uint64_t i, int64_t lo, int64_t hi) {
    return std::min(hi, lo + static_cast<int64_t>(u(i) * static_cast<double>(hi - lo + 1)));
  };
  int64_t b = 0, e = n;
  switch (kind) {
    case RowKind::decode: {
      // Past k where the row is long enough, and always short of n, so that a future exists.
      const int64_t lo = std::max<int64_t>(1, std::min<int64_t>(k + 1, n - 1));
      e = pick(0, lo, std::max(lo, n - 1));
      break;
    }
    case RowKind::ragged: b = pick(0, 1, std::max<int64_t>(1, n / 4)), e = pick(1, b, n); break;
    case RowKind::short_row: b = pick(0, 0, n / 2), e = std::min<int64_t>(n, b + std::max(1, k / 2)); break;
    case RowKind::empty: b = pick(0, 0, n), e = b; break;
    case RowKind::reversed: b = pick(0, 1, n), e = pick(1, 0, b - 1); break;
    default: break;
  }
  std::fill(row.begin(), row.end(), kNaN);  // outside the range: never read
  for (int64_t j = b; j < e; ++j) {
    const auto i = static_cast<uint64_t>(j) + 16;
    float x = normal(i, 1.0);
    if (masks && kind == RowKind::masked && u(i) < 0.3) x = kNegInf;
    if (masks && kind == RowKind::mostly_masked && u(i) < 0.85) x = kNegInf;
    if (kind == RowKind::ties) x = 1.5f;
    if (kind == RowKind::near_ties) x = std::nextafter(1000.0f, 0.0f) + static_cast<float>(gen::bits(key, 2, i) % 5) * 6.1035156e-05f;
    if (kind == RowKind::huge) x = normal(i, 1e4);
    if (kind == RowKind::tiny) x = normal(i, 1e-30);
    row[static_cast<std::size_t>(j)] = x;
  }
  if (kind == RowKind::decode && e > b) {
    float top = kNegInf;
    for (int64_t j = b; j < e; ++j) top = std::max(top, row[static_cast<std::size_t>(j)]);
    row[static_cast<std::size_t>(e - 1)] = top + 8;
    // The causal future: written (as DeepGEMM's logits past a row's end may be), larger than
    // anything the row may select.
    for (int64_t j = e; j < n; ++j) row[static_cast<std::size_t>(j)] = top + 16 + static_cast<float>(j - e);
  }
  start = static_cast<int32_t>(b);
  end = static_cast<int32_t>(e);
}

DrawnTopk draw_case(uint64_t key, int k, int64_t n, const char* what, bool masks, uint64_t seed) {
  DrawnTopk c;
  auto& b = c.inputs;
  const int64_t rows = static_cast<int64_t>(std::size(kRowKinds)) * kRowsPerKind;
  b.shape = {rows, n, k};
  b.logits.assign(static_cast<std::size_t>(rows * n), kNaN);
  b.starts.assign(static_cast<std::size_t>(rows), 0);
  b.ends.assign(static_cast<std::size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const auto kind = kRowKinds[r / kRowsPerKind];
    const auto i = static_cast<std::size_t>(r);
    draw_row(kind, gen::key(key, static_cast<uint64_t>(r)), n, k, masks,
             std::span<float>(b.logits).subspan(i * static_cast<std::size_t>(n), static_cast<std::size_t>(n)),
             b.starts[i], b.ends[i]);
  }
  c.name = fmt::format("topk_k{}_n{}_{}", k, n, what);
  c.description = fmt::format("top-{} of {} rows of {} float32 logits ({}), two rows of each edge: whole row valid; "
                              "a decode row whose newest key is the clear maximum, with larger logits written past "
                              "its end; a ragged prefill range; fewer valid than k; 30 % masked; mostly masked; "
                              "empty (end == start, end < start); all equal; near-ties; std 1e4; std 1e-30 (drawn "
                              "from seed {}, NaN outside each range{})",
                              k, rows, n, what, seed,
                              masks ? "" : "; no masked position inside a range: the kernel claims valid ranges only");
  return c;
}

}  // namespace

std::vector<DrawnTopk> draw_topk_cases(uint64_t seed, const TopkKernelInfo& info) {
  const uint64_t base = hash_text(seed, "topk");
  std::vector<int> ks = info.ks;
  if (ks.empty()) ks = {64, 2048};
  std::vector<DrawnTopk> cases;
  for (const int k : ks) {
    const uint64_t key = hash_text(base, std::to_string(k));
    // Rows longer than k (capped by the kernel's max_n) and rows all shorter than k.
    int64_t n = 2 * static_cast<int64_t>(k) + 97;
    if (info.max_n > 0) n = std::min(n, info.max_n);
    const bool masks = !info.range_all_valid;
    cases.push_back(draw_case(gen::key(key, 0), k, n, "rows_longer_than_k", masks, seed));
    cases.push_back(draw_case(gen::key(key, 1), k, std::max<int64_t>(2, k / 2 + 3), "rows_shorter_than_k", masks, seed));
  }
  return cases;
}

}  // namespace mla::certify
