// L0 (CPU): the split-KV planner of the CUDA decode kernel. Everything the kernel's grid and
// token ranges depend on is decided here, so these properties are checked without a GPU:
// exact coverage of every token for every row tile, empty sequences still written, grid
// limits (docs/field.md, "Bugs", 10), forced split counts, and permutation invariance.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/cuda/split_plan.hpp"

namespace mla::cuda {
namespace {

SplitPlanRequest request(int batch, int s_q, int heads, int m_tile = 64) {
  SplitPlanRequest r;
  r.batch = batch;
  r.s_q = s_q;
  r.heads = heads;
  r.m_tile_rows = m_tile;
  r.n_tile_tokens = 32;
  r.num_sms = 132;  // an H100/H200
  r.blocks_per_sm = 1;
  return r;
}

// The invariants every plan must satisfy, checked exhaustively. Returns the number of failures
// so that the caller's SCOPED_TRACE names the request.
void expect_valid(const SplitPlanRequest& req, const std::vector<int32_t>& lens, const SplitPlan& p) {
  const int64_t rows = int64_t{req.s_q} * req.heads;
  ASSERT_EQ(p.rows, rows);
  ASSERT_EQ(p.m_tiles, (rows + req.m_tile_rows - 1) / req.m_tile_rows);
  ASSERT_EQ(p.num_splits.size(), lens.size());
  ASSERT_EQ(p.split_base.size(), lens.size());
  EXPECT_LE(static_cast<int64_t>(p.work.size()), req.max_grid_x);
  EXPECT_LE(p.combine_blocks, req.max_grid_x);

  // Per (sequence, row tile): the token ranges of its splits, by split index.
  std::map<std::pair<int, int>, std::map<int, std::pair<int64_t, int64_t>>> ranges;
  std::set<int32_t> slots_seen;
  for (const DecodeWork& w : p.work) {
    ASSERT_GE(w.batch, 0);
    ASSERT_LT(w.batch, static_cast<int>(lens.size()));
    ASSERT_GE(w.m_tile, 0);
    ASSERT_LT(w.m_tile, p.m_tiles);
    const int32_t n = p.num_splits[static_cast<std::size_t>(w.batch)];
    ASSERT_GE(w.split, 0);
    ASSERT_LT(w.split, n);
    EXPECT_LE(0, w.tok_begin);
    EXPECT_LE(w.tok_begin, w.tok_end);
    EXPECT_LE(w.tok_end, lens[static_cast<std::size_t>(w.batch)]);
    const bool inserted =
        ranges[{w.batch, w.m_tile}].emplace(w.split, std::make_pair(w.tok_begin, w.tok_end)).second;
    EXPECT_TRUE(inserted) << "work item (b=" << w.batch << ", m=" << w.m_tile << ", split=" << w.split
                          << ") appears twice";
    if (n == 1) {
      EXPECT_EQ(w.slot, -1) << "a sequence with one split writes its output directly";
      EXPECT_EQ(p.split_base[static_cast<std::size_t>(w.batch)], -1);
    } else {
      EXPECT_EQ(w.slot, p.split_base[static_cast<std::size_t>(w.batch)] + w.split);
      EXPECT_GE(w.slot, 0);
      EXPECT_LT(w.slot, p.partial_slots);
      if (w.m_tile == 0) {
        EXPECT_TRUE(slots_seen.insert(w.slot).second) << "slot " << w.slot << " shared";
      }
    }
  }
  int64_t expected_slots = 0;
  for (std::size_t b = 0; b < lens.size(); ++b) {
    const int32_t n = p.num_splits[b];
    ASSERT_GE(n, 1);
    if (n > 1) expected_slots += n;
    for (int m = 0; m < p.m_tiles; ++m) {
      SCOPED_TRACE(testing::Message() << "sequence " << b << " (L=" << lens[b] << ") row tile " << m);
      const auto it = ranges.find({static_cast<int>(b), m});
      // Every row tile of every sequence has work, even with L = 0: its rows must be written.
      ASSERT_NE(it, ranges.end()) << "no work item";
      ASSERT_EQ(static_cast<int32_t>(it->second.size()), n);
      // Splits in order tile [0, L) exactly: contiguous, disjoint, complete.
      int64_t next = 0;
      for (int s = 0; s < n; ++s) {
        const auto& [begin, end] = it->second.at(s);
        EXPECT_EQ(begin, next) << "split " << s << " leaves a gap or overlaps";
        next = end;
      }
      EXPECT_EQ(next, lens[b]) << "tokens past the last split are never attended";
    }
  }
  EXPECT_EQ(p.partial_slots, expected_slots);
  EXPECT_EQ(p.combine_rows, static_cast<int64_t>(lens.size()) * rows);
  if (p.partial_slots > 0) {
    EXPECT_EQ(p.combine_blocks, (p.combine_rows + p.combine_rows_per_block - 1) / p.combine_rows_per_block);
  } else {
    EXPECT_EQ(p.combine_blocks, 0);
  }
}

std::vector<int32_t> random_lengths(int n, int max_len, uint64_t seed) {
  std::vector<int32_t> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] =
        static_cast<int32_t>(gen::uniform01(seed, 0, static_cast<uint64_t>(i)) * (max_len + 1));
  return v;
}

TEST(SplitPlan, CoversEveryTokenOnceForVariedShapes) {
  struct Case {
    int s_q, heads, m_tile;
    std::vector<int32_t> lens;
  };
  const std::vector<Case> cases = {
      {1, 16, 16, {4096}},
      {1, 16, 16, std::vector<int32_t>(128, 4096)},         // FlashMLA's memory-bound point
      {1, 128, 64, std::vector<int32_t>(64, 8192)},         // compute-bound
      {2, 128, 64, {1, 0, 31, 32, 33, 63, 64, 65, 1000}},   // lengths around the 32-token tile
      {4, 3, 16, {0, 0, 0}},                                // every sequence empty
      {7, 5, 64, {50, 3, 100000}},                          // padded row tiles, one long sequence
      {1, 1, 16, {1}},
      {1, 16, 16, {131072}},                                // 128K context, one sequence
  };
  for (const Case& c : cases) {
    SplitPlanRequest req = request(static_cast<int>(c.lens.size()), c.s_q, c.heads, c.m_tile);
    SCOPED_TRACE(testing::Message() << "s_q=" << c.s_q << " h=" << c.heads << " b=" << c.lens.size());
    const SplitPlan p = plan_decode(req, c.lens);
    expect_valid(req, c.lens, p);
  }
}

TEST(SplitPlan, RandomVarlenBatchesAreValid) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const int batch = 1 + static_cast<int>(gen::uniform01(seed, 1, 0) * 64);
    const int heads = 1 + static_cast<int>(gen::uniform01(seed, 1, 1) * 128);
    const int s_q = 1 + static_cast<int>(gen::uniform01(seed, 1, 2) * 8);
    const int max_len = static_cast<int>(gen::uniform01(seed, 1, 3) * 20000);
    const auto lens = random_lengths(batch, max_len, seed);
    SplitPlanRequest req = request(batch, s_q, heads, heads * s_q <= 16 ? 16 : heads * s_q <= 32 ? 32 : 64);
    req.num_sms = 1 + static_cast<int>(gen::uniform01(seed, 1, 4) * 140);
    req.blocks_per_sm = 1 + static_cast<int>(gen::uniform01(seed, 1, 5) * 2);
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    expect_valid(req, lens, plan_decode(req, lens));
  }
}

TEST(SplitPlan, SplitsWhenTheGridWouldBeTooSmall) {
  // One sequence of 64K tokens on 132 SMs: unsplit it would run on one SM.
  SplitPlanRequest req = request(1, 1, 16, 16);
  const std::vector<int32_t> lens = {65536};
  const SplitPlan p = plan_decode(req, lens);
  expect_valid(req, lens, p);
  EXPECT_GT(p.num_splits[0], 1);
  EXPECT_LE(p.num_splits[0], req.max_splits);
  // Automatic splits start on a 32-token tile boundary, so only the last tile is partial.
  for (const DecodeWork& w : p.work) EXPECT_EQ(w.tok_begin % req.n_tile_tokens, 0);
}

TEST(SplitPlan, DoesNotSplitWhenTheBatchFillsTheGpu) {
  // 132 SMs, one block each: 512 (sequence, row tile) pairs are nearly four full waves already.
  SplitPlanRequest req = request(256, 1, 128, 64);
  const std::vector<int32_t> lens(256, 4096);
  const SplitPlan p = plan_decode(req, lens);
  expect_valid(req, lens, p);
  for (int32_t n : p.num_splits) EXPECT_EQ(n, 1);
  EXPECT_EQ(p.partial_slots, 0);
  EXPECT_EQ(p.combine_blocks, 0);
}

TEST(SplitPlan, ForcedSplitsAreExactIncludingEmptySplits) {
  for (int forced : {1, 2, 3, 7, 64}) {
    SplitPlanRequest req = request(4, 2, 16, 32);
    req.forced_splits = forced;
    const std::vector<int32_t> lens = {0, 5, 100, 1000};
    SCOPED_TRACE(testing::Message() << "forced " << forced);
    const SplitPlan p = plan_decode(req, lens);
    expect_valid(req, lens, p);
    for (int32_t n : p.num_splits) EXPECT_EQ(n, forced);
    // Token-granular cut: split s of a length-L sequence is [L·s/n, L·(s+1)/n).
    for (const DecodeWork& w : p.work) {
      const int64_t L = lens[static_cast<std::size_t>(w.batch)];
      EXPECT_EQ(w.tok_begin, L * w.split / forced);
      EXPECT_EQ(w.tok_end, L * (w.split + 1) / forced);
    }
    if (forced > 5) {
      // More splits than tokens: some splits are empty, the combine must cope (bug 1).
      const bool has_empty = std::any_of(p.work.begin(), p.work.end(), [](const DecodeWork& w) {
        return w.batch == 1 && w.tok_begin == w.tok_end;
      });
      EXPECT_TRUE(has_empty);
    }
  }
}

TEST(SplitPlan, RespectsTheGridLimitAndUsesOnlyX) {
  // s_q 1024 with 128 heads: 2048 row tiles per sequence; 40 sequences are 81920 blocks, past
  // 65535 (the y/z limit real kernels hit, bug 10) and within x.
  SplitPlanRequest req = request(40, 1024, 128, 64);
  const std::vector<int32_t> lens(40, 2048);
  const SplitPlan p = plan_decode(req, lens);
  expect_valid(req, lens, p);
  EXPECT_GT(p.work.size(), 65535u);

  // A limit the plan cannot meet is refused with a typed error naming the grid, never clipped.
  SplitPlanRequest small = request(4, 1, 16, 16);
  small.forced_splits = 8;
  small.max_grid_x = 31;  // 4 sequences × 1 tile × 8 splits = 32 blocks
  try {
    (void)plan_decode(small, {10, 10, 10, 10});
    FAIL() << "a grid of 32 blocks passed a limit of 31";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("grid limit"), std::string::npos) << e.what();
  }
  // Automatic splitting stays under the limit instead of failing.
  SplitPlanRequest capped = request(1, 1, 16, 16);
  capped.max_grid_x = 5;
  const std::vector<int32_t> one = {1 << 20};
  const SplitPlan pc = plan_decode(capped, one);
  expect_valid(capped, one, pc);
  EXPECT_LE(pc.work.size(), 5u);
}

TEST(SplitPlan, VeryLongSequencesKeepTokenIndicesExact) {
  // Lengths near 2^31 (no cache that long exists, but the arithmetic must not wrap).
  SplitPlanRequest req = request(2, 1, 16, 16);
  const std::vector<int32_t> lens = {2147483000, 1};
  const SplitPlan p = plan_decode(req, lens);
  expect_valid(req, lens, p);
  req.forced_splits = 1000;
  expect_valid(req, lens, plan_decode(req, lens));
}

TEST(SplitPlan, BatchPermutationPermutesThePlan) {
  const std::vector<int32_t> lens = {4000, 0, 17, 70000, 512, 513, 4000, 1};
  SplitPlanRequest req = request(static_cast<int>(lens.size()), 2, 16, 32);
  const SplitPlan p = plan_decode(req, lens);
  const auto perm = gen::permutation(5, 0, static_cast<int64_t>(lens.size()));
  std::vector<int32_t> plens;
  for (int64_t i : perm) plens.push_back(lens[static_cast<std::size_t>(i)]);
  const SplitPlan q = plan_decode(req, plens);
  expect_valid(req, plens, q);
  // Sequence perm[i] of the original is sequence i of the permuted batch: same split count and
  // the same token ranges for every row tile, hence bitwise-equal results.
  auto ranges_of = [](const SplitPlan& pl, int b) {
    std::vector<std::tuple<int, int, int, int>> r;
    for (const DecodeWork& w : pl.work)
      if (w.batch == b) r.emplace_back(w.m_tile, w.split, w.tok_begin, w.tok_end);
    std::sort(r.begin(), r.end());
    return r;
  };
  for (std::size_t i = 0; i < perm.size(); ++i) {
    const int orig = static_cast<int>(perm[i]);
    EXPECT_EQ(q.num_splits[i], p.num_splits[static_cast<std::size_t>(orig)]);
    EXPECT_EQ(ranges_of(q, static_cast<int>(i)), ranges_of(p, orig));
  }
}

TEST(SplitPlan, IsDeterministic) {
  const auto lens = random_lengths(37, 9000, 11);
  SplitPlanRequest req = request(37, 1, 64, 64);
  const SplitPlan a = plan_decode(req, lens), b = plan_decode(req, lens);
  ASSERT_EQ(a.work.size(), b.work.size());
  for (std::size_t i = 0; i < a.work.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.work[i], &b.work[i], sizeof(DecodeWork)), 0) << "work item " << i;
  }
  EXPECT_EQ(a.num_splits, b.num_splits);
  EXPECT_EQ(a.describe(), b.describe());
}

TEST(SplitPlan, WorkspaceBytesFollowTheSlots) {
  SplitPlanRequest req = request(2, 1, 16, 16);
  req.forced_splits = 3;
  const SplitPlan p = plan_decode(req, {100, 200});
  EXPECT_EQ(p.partial_slots, 6);
  EXPECT_EQ(p.workspace_bytes(), p.partial_slots * p.rows * (512 + 1) * 4);
}

TEST(SplitPlan, RejectsMalformedRequests) {
  auto expect_error = [](SplitPlanRequest r, std::vector<int32_t> lens, const char* needle) {
    try {
      (void)plan_decode(r, lens);
      ADD_FAILURE() << "accepted a request with bad " << needle;
    } catch (const UnsupportedError& e) {
      ADD_FAILURE() << "malformed input reported as unsupported: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(request(0, 1, 16), {}, "batch");
  expect_error(request(1, 0, 16), {1}, "s_q");
  expect_error(request(1, 1, 0), {1}, "heads");
  expect_error(request(2, 1, 16), {1}, "lengths");
  expect_error(request(1, 1, 16), {-1}, "cache_seqlens[0]");
  SplitPlanRequest r = request(1, 1, 16);
  r.num_sms = 0;
  expect_error(r, {1}, "num_sms");
  r = request(1, 1, 16);
  r.forced_splits = -2;
  expect_error(r, {1}, "forced_splits");
  r = request(1, 1, 16);
  r.n_tile_tokens = 0;
  expect_error(r, {1}, "n_tile_tokens");
}

}  // namespace
}  // namespace mla::cuda
