#include "mla/cuda/split_plan.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"

namespace mla::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Fixed cost of a thread block in units of one key tile: loading its query tile (as many bytes
// as ~2 key tiles) and writing its rows. A split sequence additionally pays for writing fp32
// partials and the combine pass that reads them back.
constexpr int64_t kBlockOverheadTiles = 2;
constexpr int64_t kSplitOverheadTiles = 2;

void validate(const SplitPlanRequest& r, const std::vector<int32_t>& seqlens) {
  auto positive = [](const char* name, int64_t v) {
    if (v <= 0) throw Error(fmt::format("plan_decode: {} must be positive, got {}", name, v));
  };
  positive("batch", r.batch);
  positive("s_q", r.s_q);
  positive("heads", r.heads);
  positive("m_tile_rows", r.m_tile_rows);
  positive("n_tile_tokens", r.n_tile_tokens);
  positive("num_sms", r.num_sms);
  positive("blocks_per_sm", r.blocks_per_sm);
  positive("max_splits", r.max_splits);
  positive("max_grid_x", r.max_grid_x);
  if (r.forced_splits < 0)
    throw Error(fmt::format("plan_decode: forced_splits must be >= 0, got {}", r.forced_splits));
  if (seqlens.size() != static_cast<std::size_t>(r.batch))
    throw Error(fmt::format("plan_decode: {} sequence lengths for batch {}", seqlens.size(), r.batch));
  for (std::size_t b = 0; b < seqlens.size(); ++b) {
    if (seqlens[b] < 0)
      throw Error(fmt::format("plan_decode: cache_seqlens[{}] = {} is negative", b, seqlens[b]));
  }
  const int64_t rows = int64_t{r.s_q} * r.heads;
  if (rows > std::numeric_limits<int32_t>::max())
    throw UnsupportedError(fmt::format("plan_decode: s_q·heads = {}·{} = {} query rows per sequence "
                                       "exceed the kernel's 32-bit row index",
                                       r.s_q, r.heads, rows));
}

// Splits per sequence chosen automatically: the tokens-per-split `c` (in key tiles) that
// minimises waves × (c + overhead), where a wave is one round of `capacity` resident blocks.
// It sees the lengths only through their multiset (max and per-length counts), which is what
// keeps the plan of a permuted batch a permutation of the plan.
std::vector<int32_t> auto_splits(const SplitPlanRequest& r, const std::vector<int32_t>& seqlens,
                                 int64_t m_tiles, std::vector<int64_t>& tiles_per_split) {
  const std::size_t batch = seqlens.size();
  std::vector<int64_t> n_tiles(batch);
  int64_t max_n = 0;
  for (std::size_t b = 0; b < batch; ++b) {
    n_tiles[b] = ceil_div(seqlens[b], r.n_tile_tokens);
    max_n = std::max(max_n, n_tiles[b]);
  }
  std::vector<int32_t> splits(batch, 1);
  tiles_per_split.assign(batch, 0);
  if (max_n == 0) return splits;

  const int64_t capacity = int64_t{r.num_sms} * r.blocks_per_sm;
  int64_t best_c = max_n;
  double best_cost = std::numeric_limits<double>::infinity();
  int64_t prev_c = -1;
  for (int64_t s = 1; s <= r.max_splits; ++s) {
    const int64_t c = ceil_div(max_n, s);
    if (c == prev_c) continue;  // the same candidate again
    prev_c = c;
    int64_t blocks = 0;
    for (std::size_t b = 0; b < batch; ++b) blocks += m_tiles * std::max<int64_t>(1, ceil_div(n_tiles[b], c));
    if (blocks > r.max_grid_x) break;  // more splits only make more blocks
    const int64_t waves = ceil_div(blocks, capacity);
    const int64_t overhead = kBlockOverheadTiles + (c < max_n ? kSplitOverheadTiles : 0);
    const double cost = static_cast<double>(waves) * static_cast<double>(c + overhead);
    if (cost < best_cost) {  // strict: on a tie keep the larger c (fewer splits, less combine)
      best_cost = cost;
      best_c = c;
    }
    if (c == 1) break;
  }
  for (std::size_t b = 0; b < batch; ++b) {
    if (n_tiles[b] == 0) continue;
    const int64_t s = ceil_div(n_tiles[b], best_c);
    const int64_t per = ceil_div(n_tiles[b], s);  // balance the tiles over the s splits
    splits[b] = static_cast<int32_t>(ceil_div(n_tiles[b], per));
    tiles_per_split[b] = per;
  }
  return splits;
}

}  // namespace

int64_t SplitPlan::workspace_bytes() const {
  return partial_slots * int64_t{rows} * (512 + 1) * int64_t{sizeof(float)};
}

std::string SplitPlan::describe() const {
  return fmt::format("b={} rows={} m_tiles={} splits=[{}] grid={} slots={} combine_blocks={}",
                     num_splits.size(), rows, m_tiles, fmt::join(num_splits, ","), work.size(),
                     partial_slots, combine_blocks);
}

SplitPlan plan_decode(const SplitPlanRequest& r, const std::vector<int32_t>& seqlens) {
  validate(r, seqlens);
  SplitPlan plan;
  const int64_t rows = int64_t{r.s_q} * r.heads;
  const int64_t m_tiles = ceil_div(rows, r.m_tile_rows);
  plan.rows = static_cast<int>(rows);
  plan.m_tiles = static_cast<int>(m_tiles);
  const std::size_t batch = seqlens.size();

  std::vector<int64_t> tiles_per_split;
  if (r.forced_splits > 0) {
    plan.num_splits.assign(batch, r.forced_splits);
  } else {
    plan.num_splits = auto_splits(r, seqlens, m_tiles, tiles_per_split);
  }

  int64_t items = 0;
  for (int32_t s : plan.num_splits) items += m_tiles * s;
  if (items > r.max_grid_x)
    throw UnsupportedError(fmt::format(
        "plan_decode: {} thread blocks (batch {} × {} row tiles × splits) exceed the grid limit {} "
        "(s_q={}, heads={}, forced_splits={})",
        items, batch, m_tiles, r.max_grid_x, r.s_q, r.heads, r.forced_splits));

  plan.split_base.assign(batch, -1);
  int64_t slots = 0;
  for (std::size_t b = 0; b < batch; ++b) {
    if (plan.num_splits[b] > 1) {
      if (slots > std::numeric_limits<int32_t>::max() - plan.num_splits[b])
        throw UnsupportedError(fmt::format("plan_decode: more than 2^31 partial-result slots"));
      plan.split_base[b] = static_cast<int32_t>(slots);
      slots += plan.num_splits[b];
    }
  }
  plan.partial_slots = slots;
  if (slots > 0 && slots > (int64_t{1} << 62) / (rows * 513 * 4))
    throw UnsupportedError("plan_decode: the partial-result workspace would exceed 2^62 bytes");

  plan.work.reserve(static_cast<std::size_t>(items));
  for (std::size_t b = 0; b < batch; ++b) {
    const int64_t L = seqlens[b];
    const int32_t s_count = plan.num_splits[b];
    for (int32_t s = 0; s < s_count; ++s) {
      int64_t begin = 0, end = 0;
      if (r.forced_splits > 0) {
        begin = L * s / s_count;
        end = L * (s + 1) / s_count;
      } else if (L > 0) {
        const int64_t span = tiles_per_split[b] * r.n_tile_tokens;
        begin = std::min<int64_t>(L, span * s);
        end = std::min<int64_t>(L, span * (s + 1));
      }
      for (int64_t m = 0; m < m_tiles; ++m) {
        plan.work.push_back(DecodeWork{static_cast<int32_t>(b), static_cast<int32_t>(m), s,
                                       static_cast<int32_t>(begin), static_cast<int32_t>(end),
                                       s_count > 1 ? plan.split_base[b] + s : -1});
      }
    }
  }

  plan.combine_rows = static_cast<int64_t>(batch) * rows;
  plan.combine_blocks = slots > 0 ? ceil_div(plan.combine_rows, plan.combine_rows_per_block) : 0;
  if (plan.combine_blocks > r.max_grid_x)
    throw UnsupportedError(fmt::format("plan_decode: the combine grid of {} blocks (batch {} × {} rows "
                                       "/ {}) exceeds the grid limit {}",
                                       plan.combine_blocks, batch, rows,
                                       plan.combine_rows_per_block, r.max_grid_x));
  return plan;
}

}  // namespace mla::cuda
