// L0 (CPU): the source of the CUDA decode and combine kernels, executed on the host by the warp
// simulator (warp_sim.hpp), on small paged problems with NaN-poisoned unused slots and
// sentinel block-table entries. Checks what can be checked without a GPU:
//  * results against the fp64 truth through the tolerance engine (the ratio rule armed by the
//    deployed-precision reference), with outputs pre-filled with NaN and guard bands around
//    every output and workspace buffer;
//  * every cp.async source is q or a cache slot of a token < L of its sequence (FIELD-NOTES
//    bugs 2, 4, 6: no read of a sentinel page, a poisoned slot, or a padded head row);
//  * page permutation and batch order give bitwise-equal results, split counts agree;
//  * shared-memory addresses are aligned and in range, barriers and warp collectives are
//    reached by every thread, no cp.async is left un-waited.
// The simulator models the PTX fragment layouts from their documentation; a GPU run
// (mla_cuda_attention_tests) remains the judge of the real instructions.
#include "warp_sim_builtins.hpp"

#define MLA_HOST_SIM 1
#include "detail/mla_decode_kernels.cuh"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numbers>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "gpu_support.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/split_plan.hpp"
#include "support/attn_builder.hpp"

namespace mla::cuda {
namespace {

using detail::DecodeParams;
namespace dec = detail::decode;

constexpr std::size_t kGuard = 64;  // elements of guard band before and after each buffer

template <class T>
struct Guarded {
  std::vector<T> v;
  T canary;
  Guarded(std::size_t n, T fill, T canary_) : v(n + 2 * kGuard, fill), canary(canary_) {
    std::fill(v.begin(), v.begin() + kGuard, canary);
    std::fill(v.end() - kGuard, v.end(), canary);
  }
  T* data() { return v.data() + kGuard; }
  std::size_t size() const { return v.size() - 2 * kGuard; }
  bool intact() const {
    auto same = [&](const T& x) { return std::memcmp(&x, &canary, sizeof(T)) == 0; };
    return std::all_of(v.begin(), v.begin() + kGuard, same) && std::all_of(v.end() - kGuard, v.end(), same);
  }
};

struct SimRun {
  AttnOutputs out;
  SplitPlan plan;
  std::vector<std::string> errors;
};

template <int RG>
std::vector<std::string> launch_decode(const DecodeParams& p, const std::function<bool(const void*)>& allowed) {
  sim::Launch cfg;
  cfg.grid = static_cast<unsigned>(p.num_work);
  cfg.threads = dec::Tile<RG>::kThreads;
  cfg.smem_bytes = dec::Tile<RG>::kSmem;
  cfg.global_read_allowed = allowed;
  return sim::launch(cfg, [&] { dec::mla_decode_kernel<RG>(p); });
}

// What cuda_mla_decode does on the device, with the simulator in place of the GPU.
SimRun run_sim(const AttnInputs& in, int forced_splits, int num_sms = 4) {
  const AttnShape& s = in.shape;
  SimRun r;
  const int64_t rows = int64_t{s.s_q} * s.heads;
  const int tile_rows = detail::decode_tile_rows(rows);
  SplitPlanRequest req;
  req.batch = s.batch;
  req.s_q = s.s_q;
  req.heads = s.heads;
  req.m_tile_rows = tile_rows;
  req.n_tile_tokens = detail::kDecodeTileTokens;
  req.num_sms = num_sms;
  req.blocks_per_sm = 1;
  req.forced_splits = forced_splits;
  r.plan = plan_decode(req, std::vector<int32_t>(in.cache_seqlens.begin(), in.cache_seqlens.end()));

  const std::size_t n_out = static_cast<std::size_t>(s.batch * rows * 512);
  const std::size_t n_lse = static_cast<std::size_t>(s.batch * rows);
  const std::size_t slot_rows = static_cast<std::size_t>(r.plan.partial_slots * r.plan.rows);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float canary_f = std::bit_cast<float>(0xA5A5A5A5u);
  Guarded<uint16_t> out(n_out, 0xFFFF, 0xA5A5);
  Guarded<float> lse(n_lse, nan, canary_f), ws_out(slot_rows * 512, nan, canary_f), ws_lse(slot_rows, nan, canary_f);
  // The block table sits between sentinel-filled bands, so a read past either end reads a
  // sentinel and the cp.async check below reports it instead of undefined behaviour.
  Guarded<int32_t> table(in.block_table.size(), 0, 2147483647);
  std::copy(in.block_table.begin(), in.block_table.end(), table.data());

  DecodeParams p;
  p.q = in.q.data();
  p.cache = reinterpret_cast<const uint16_t*>(in.kv_cache.data());
  p.block_table = table.data();
  p.seqlens = in.cache_seqlens.data();
  p.work = r.plan.work.data();
  p.num_splits = r.plan.num_splits.data();
  p.split_base = r.plan.split_base.data();
  p.num_work = static_cast<int64_t>(r.plan.work.size());
  p.batch = s.batch;
  p.s_q = s.s_q;
  p.heads = s.heads;
  p.page_size = s.page_size;
  p.max_blocks = s.max_blocks;
  p.causal = s.causal ? 1 : 0;
  p.scale_log2 = static_cast<float>(in.softmax_scale * std::numbers::log2e);
  p.out = out.data();
  p.lse = lse.data();
  p.ws_out = ws_out.data();
  p.ws_lse = ws_lse.data();
  p.combine_blocks = r.plan.combine_blocks;
  p.combine_rows_per_block = r.plan.combine_rows_per_block;

  // Allowed global reads: q, and the cache slots of tokens t < L of each sequence.
  std::set<int64_t> slots;
  for (int b = 0; b < s.batch; ++b) {
    const int32_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
    for (int32_t t = 0; t < L; ++t)
      slots.insert(int64_t{in.block_table[static_cast<std::size_t>(b * s.max_blocks + t / s.page_size)]} * s.page_size +
                   t % s.page_size);
  }
  const auto* q0 = reinterpret_cast<const unsigned char*>(in.q.data());
  const auto* c0 = in.kv_cache.data();
  auto allowed = [&](const void* src) {
    const auto* a = static_cast<const unsigned char*>(src);
    if (a >= q0 && a + 16 <= q0 + in.q.size_bytes()) return true;
    if (a < c0) return false;
    const uint64_t off = static_cast<uint64_t>(a - c0);
    return off + 16 <= in.kv_cache.size() && slots.count(static_cast<int64_t>(off / 1152)) > 0;
  };

  switch (tile_rows) {
    case 16: r.errors = launch_decode<1>(p, allowed); break;
    case 32: r.errors = launch_decode<2>(p, allowed); break;
    default: r.errors = launch_decode<4>(p, allowed); break;
  }
  if (r.errors.empty() && p.combine_blocks > 0) {
    sim::Launch cfg;
    cfg.grid = static_cast<unsigned>(p.combine_blocks);
    cfg.threads = 32 * static_cast<unsigned>(p.combine_rows_per_block);
    r.errors = sim::launch(cfg, [&] { dec::mla_combine_kernel(p); });
  }
  if (!out.intact()) r.errors.push_back("guard band of out overwritten");
  if (!lse.intact()) r.errors.push_back("guard band of lse overwritten");
  if (!ws_out.intact()) r.errors.push_back("guard band of ws_out overwritten");
  if (!ws_lse.intact()) r.errors.push_back("guard band of ws_lse overwritten");
  r.out.dtype = OutDType::bf16;
  r.out.out.resize(n_out);
  for (std::size_t i = 0; i < n_out; ++i) r.out.out[i] = bf16_to_float(out.data()[i]);
  r.out.lse.assign(lse.data(), lse.data() + n_lse);
  return r;
}

struct Case {
  std::string name;
  std::vector<int32_t> lens;
  int s_q, heads;
  bool causal;
  int page_size;
  int forced_splits;  // 0: automatic, on a 4-SM "device" so that it splits
  double q_std;
  uint64_t seed;
};

void PrintTo(const Case& c, std::ostream* os) {
  // No brackets, commas or semicolons: ctest's label script reads these names as a CMake list.
  *os << c.name << " lengths " << fmt::format("{}", fmt::join(c.lens, " ")) << " s_q " << c.s_q << " heads "
      << c.heads << " forced splits " << c.forced_splits;
}

std::vector<Case> cases() {
  return {
      // Varlen with an empty and a one-token sequence; 16-row tile (64 threads).
      {"varlen_h16", {37, 0, 130, 1, 64, 33}, 1, 16, true, 16, 0, 1.0, 1},
      // 128 heads: two 64-row tiles (256 threads), forced splits with split edges mid-tile.
      {"h128_split3", {100, 70}, 1, 128, true, 64, 3, 1.0, 2},
      // Causal multi-query with rows that see nothing (L < s_q), odd page size.
      {"sq4_causal", {2, 5, 100, 0, 3}, 4, 3, true, 7, 0, 1.0, 3},
      // 35 rows in a 64-row tile: 29 padding rows never read or written.
      {"sq7_h5_split2", {50, 3}, 7, 5, true, 16, 2, 1.0, 4},
      // 24 rows: the 32-row instance (128 threads).
      {"h8_sq3", {90, 45}, 3, 8, true, 16, 0, 1.0, 5},
      // Large logits through split and combine (FIELD-NOTES bug 3), splits empty for L = 0.
      {"large_logits_split5", {300, 0, 17}, 2, 16, true, 64, 5, 100.0, 6},
      // Non-causal multi-query, page size 1.
      {"noncausal_ps1", {40, 70}, 2, 16, false, 1, 0, 1.0, 7},
  };
}

struct Built {
  testing::Logical lg;
  testing::Paged pg;
  AttnInputs in;
};

Built build(const Case& c, const testing::Layout& layout) {
  testing::AttnSpec spec;
  spec.seqlens = c.lens;
  spec.s_q = c.s_q;
  spec.heads = c.heads;
  spec.causal = c.causal;
  spec.q_std = c.q_std;
  spec.seed = c.seed;
  Built b;
  b.lg = testing::make_logical(spec);
  b.pg = testing::lay_out(b.lg, layout);
  b.in = b.pg.inputs();
  return b;
}

class DecodeSim : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeSim, MatchesTruthAndReadsOnlyValidTokens) {
  const Case& c = GetParam();
  testing::Layout layout;
  layout.page_size = c.page_size;
  const Built b = build(c, layout);
  const SimRun r = run_sim(b.in, c.forced_splits);
  ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
  RecordProperty("plan", r.plan.describe());
  const gputest::Result truth = gputest::truth_attention(b.in);
  const gputest::Result same = gputest::same_dtype_attention(b.in);
  EXPECT_TRUE(gputest::matches(c.name, r.out, b.in.shape, truth.out, truth.lse, std::span<const double>(same.out)));
}

INSTANTIATE_TEST_SUITE_P(Kernel, DecodeSim, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(DecodeSimInvariance, LayoutAndBatchOrderAreBitwiseInvariantAndSplitsAgree) {
  const Case c{"inv", {37, 0, 130, 5, 64}, 2, 8, true, 16, 0, 1.0, 21};
  testing::Layout a, pages, order;
  a.page_size = 16;
  pages.page_size = 5;
  pages.perm_seed = 99;
  pages.spare_blocks = 7;
  for (int64_t i : gen::permutation(33, 0, static_cast<int64_t>(c.lens.size()))) order.order.push_back(static_cast<int>(i));
  order.page_size = 16;
  const Built ba = build(c, a), bp = build(c, pages), bo = build(c, order);
  const SimRun ra = run_sim(ba.in, 0), rp = run_sim(bp.in, 0), ro = run_sim(bo.in, 0);
  for (const SimRun* r : {&ra, &rp, &ro}) ASSERT_TRUE(r->errors.empty()) << fmt::format("{}", fmt::join(r->errors, "\n"));
  EXPECT_TRUE(gputest::bitwise_equal("out, other pages", rp.out.out, ra.out.out));
  EXPECT_TRUE(gputest::bitwise_equal("lse, other pages", rp.out.lse, ra.out.lse));
  const int64_t orow = int64_t{c.s_q} * c.heads * 512, lrow = int64_t{c.heads} * c.s_q;
  for (std::size_t i = 0; i < order.order.size(); ++i) {
    const int64_t o = order.order[i];
    const auto so = std::span<const double>(ro.out.out).subspan(i * orow, orow);
    const auto sa = std::span<const double>(ra.out.out).subspan(static_cast<std::size_t>(o * orow), orow);
    EXPECT_TRUE(gputest::bitwise_equal(fmt::format("out of sequence {}", o), so, sa));
    const auto lo = std::span<const double>(ro.out.lse).subspan(i * lrow, lrow);
    const auto la = std::span<const double>(ra.out.lse).subspan(static_cast<std::size_t>(o * lrow), lrow);
    EXPECT_TRUE(gputest::bitwise_equal(fmt::format("lse of sequence {}", o), lo, la));
  }
  const gputest::Result truth = gputest::truth_attention(ba.in);
  for (int n : {1, 2, 7, 40}) {
    const SimRun rs = run_sim(ba.in, n);
    ASSERT_TRUE(rs.errors.empty()) << fmt::format("{}", fmt::join(rs.errors, "\n"));
    EXPECT_TRUE(gputest::matches(fmt::format("splits={}", n), rs.out, ba.in.shape, truth.out, truth.lse));
    EXPECT_TRUE(gputest::matches(fmt::format("splits={} vs automatic", n), rs.out, ba.in.shape, ra.out.out, ra.out.lse));
  }
}

TEST(DecodeSimSelfCheck, TheSimulatorCatchesAForbiddenRead) {
  // The read check is what makes "reads only valid tokens" meaningful: shrink the allowed set by
  // declaring one sequence one token shorter than the cache the kernel is told about, and the
  // kernel's legitimate read of that token must be reported.
  const Case c{"self", {40}, 1, 16, true, 16, 0, 1.0, 9};
  const Built b = build(c, testing::Layout{});
  // Run with the true length but allow only the 39 first tokens.
  const AttnShape& s = b.in.shape;
  std::set<int64_t> slots;
  for (int32_t t = 0; t < 39; ++t)
    slots.insert(int64_t{b.in.block_table[static_cast<std::size_t>(t / s.page_size)]} * s.page_size + t % s.page_size);
  SplitPlanRequest req;
  req.batch = 1;
  req.s_q = 1;
  req.heads = 16;
  req.m_tile_rows = 16;
  req.num_sms = 1;
  const SplitPlan plan = plan_decode(req, {40});
  std::vector<uint16_t> out(16 * 512);
  std::vector<float> lse(16);
  DecodeParams p;
  p.q = b.in.q.data();
  p.cache = reinterpret_cast<const uint16_t*>(b.in.kv_cache.data());
  p.block_table = b.in.block_table.data();
  p.seqlens = b.in.cache_seqlens.data();
  p.work = plan.work.data();
  p.num_splits = plan.num_splits.data();
  p.split_base = plan.split_base.data();
  p.num_work = static_cast<int64_t>(plan.work.size());
  p.batch = 1;
  p.s_q = 1;
  p.heads = 16;
  p.page_size = s.page_size;
  p.max_blocks = s.max_blocks;
  p.scale_log2 = 0.2f;
  p.out = out.data();
  p.lse = lse.data();
  const auto* q0 = reinterpret_cast<const unsigned char*>(b.in.q.data());
  const auto* c0 = b.in.kv_cache.data();
  const auto errors = launch_decode<1>(p, [&](const void* src) {
    const auto* a = static_cast<const unsigned char*>(src);
    if (a >= q0 && a < q0 + b.in.q.size_bytes()) return true;
    return a >= c0 && slots.count(static_cast<int64_t>((a - c0) / 1152)) > 0;
  });
  ASSERT_FALSE(errors.empty()) << "the read of token 39 went unnoticed";
  EXPECT_NE(errors[0].find("must not touch"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace mla::cuda
