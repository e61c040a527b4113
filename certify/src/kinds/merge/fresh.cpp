// The merges drawn at run time (family fresh, rows of file fresh_merge): from the run's seed, per
// implementation, one case per state dtype it claims, tiny (a few thousand values), holding every
// edge a merge has: either side empty as +inf (FA2's empty row) and as -inf (FA3's, FlashInfer's)
// with NaN in that side's out (never to be read), both sides empty in each combination, lse 1000
// apart around 500 (every e^lse overflows), and finite states.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "kinds/merge/merge_rows.hpp"
#include "kinds/stored_kind.hpp"
#include "mla/core/generator.hpp"

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The token rows of a drawn merge, in order: what each holds on side a and side b (a NaN lse
// stands for a finite one drawn from the seed).
struct MergeRow {
  double lse_a, lse_b;
  const char* what;
};
constexpr double kDrawn = std::numeric_limits<double>::quiet_NaN();
const MergeRow kRows[] = {
    {kInf, kDrawn, "a empty (+inf)"},        {kDrawn, -kInf, "b empty (-inf)"},
    {-kInf, kDrawn, "a empty (-inf)"},       {kInf, -kInf, "both empty (+inf, -inf)"},
    {-kInf, -kInf, "both empty (-inf)"},     {kInf, kInf, "both empty (+inf)"},
    {500, 1500, "lse 1000 apart around 500"}, {500, -500, "lse 1000 apart around 500"},
    {kDrawn, kDrawn, "finite"},
};

}  // namespace

std::vector<DrawnMerge> draw_merge_cases(uint64_t seed, const MergeKernelInfo& info) {
  const uint64_t base = hash_text(seed, "merge");
  const int d = info.head_dims.empty() ? kMhaDv : info.head_dims.front();
  std::vector<DrawnMerge> cases;
  for (const auto dtype : info.dtypes) {
    const uint64_t key = hash_text(base, to_string(dtype));
    const int heads = 1 + 2 * static_cast<int>(gen::bits(key, 0, 0) % 3);  // 1, 3 or 5
    DrawnMerge c;
    auto& b = c.inputs;
    const auto n = static_cast<int64_t>(std::size(kRows));
    b.shape = {n, heads, d, dtype};
    b.lse_a.resize(static_cast<std::size_t>(n * heads));
    b.lse_b.resize(b.lse_a.size());
    std::size_t drawn = 0;
    for (int h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < n; ++t) {
        const auto& row = kRows[t];
        const auto i = static_cast<std::size_t>(h * n + t);
        // Finite lse of the order a prefill writes; the far-apart rows move a little per head.
        const auto lse = [&](double v) {
          const double u = gen::uniform01(key, 1, drawn++);
          return std::isnan(v) ? -5 + 25 * u : std::isinf(v) ? v : v + 4 * u;
        };
        b.lse_a[i] = static_cast<float>(lse(row.lse_a));
        b.lse_b[i] = static_cast<float>(lse(row.lse_b));
      }
    }
    // out [n, h, d]: values of the dtype, NaN on an empty side (which the merge must not read).
    for (int64_t t = 0; t < n; ++t) {
      for (int h = 0; h < heads; ++h) {
        const auto i = static_cast<std::size_t>(h * n + t);
        for (int j = 0; j < d; ++j) {
          const auto e = static_cast<uint64_t>((t * heads + h) * d + j);
          append_state_value(dtype, std::isinf(b.lse_a[i]) ? kDrawn : gen::value(key, 2, e, 0, 1), b.out_a);
          append_state_value(dtype, std::isinf(b.lse_b[i]) ? kDrawn : gen::value(key, 3, e, 0, 1), b.out_b);
        }
      }
    }
    c.name = fmt::format("merge_{}_edges_h{}_d{}", to_string(dtype), heads, d);
    std::string rows;
    for (const auto& row : kRows) rows += std::string(rows.empty() ? "" : "; ") + row.what;
    c.description = fmt::format("merge of {} states, {} heads, head_dim {}, one token per edge: {} (drawn from seed "
                                "{}, truth from the C++ oracle)",
                                to_string(dtype), heads, d, rows, seed);
    cases.push_back(std::move(c));
  }
  return cases;
}

void certify_fresh_merge(Session& s, const Implementation& k, uint64_t seed) {
  if (!k.merge || k.unavailable) return;
  std::vector<DrawnMerge> cases;
  try {
    cases = draw_merge_cases(seed, k.merge->info());
  } catch (const std::exception& e) {
    auto r = s.base_result({kFresh, kFreshMergeFile, "merge"});
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("fresh merge cases cannot be drawn: {}", e.what()));
    if (s.in_shard(kFresh, r.name)) s.record(k, std::move(r));
    return;
  }
  // In name order, as every drawn row of a run (`mla merge` puts a shard's rows in that order).
  std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : cases) {
    if (stop_requested(s)) break;
    if (drawn_case(s, k, kFreshMergeFile, c.name) != Drawn::run) continue;
    const auto t0 = Clock::now();
    const auto in = c.inputs.view();
    ref::MergeResult truth;
    try {
      truth = merge_truth(in);
    } catch (const std::exception& e) {
      auto r = s.base_result({kFresh, kFreshMergeFile, c.name});
      r.verdict = tol::Verdict::error;
      r.reasons.push_back(fmt::format("the truth could not be computed: {}", e.what()));
      s.record(k, std::move(r));
      continue;
    }
    s.record(k, merge_row(s, k, {kFresh, kFreshMergeFile, c.name}, c.description, in, truth));
    s.progress << fmt::format("[fresh] {} {:.2f}s: {}={}\n", c.name,
                              std::chrono::duration<double>(Clock::now() - t0).count(), k.info.name,
                              tol::to_string(s.report(k).cases.back().verdict));
  }
  s.save();
}

}  // namespace mla::certify
