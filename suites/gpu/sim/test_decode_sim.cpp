// L0 (CPU): the source of the CUDA decode and combine kernels, executed on the host by the warp
// simulator (warp_sim.hpp), on small paged problems with NaN-poisoned unused slots and
// sentinel block-table entries, for every instance: bf16 and FP8 caches, dense and sparse.
// Checks what can be checked without a GPU:
//  * results against the fp64 truth through the tolerance engine (the ratio rule armed by the
//    deployed-precision reference), with outputs pre-filled with NaN and guard bands around
//    every output and workspace buffer;
//  * every cp.async source is q or a cache slot of a token < L of its sequence, and for sparse
//    inputs only a slot some row names with a valid index (docs/field.md, "Bugs", 2, 4, 6, 8: no
//    read of a sentinel page, a poisoned slot, a padded head row or an invalid index);
//  * page permutation and batch order give bitwise-equal results, split counts agree;
//  * shared-memory addresses are aligned and in range, barriers and warp collectives are
//    reached by every thread, no cp.async is left un-waited;
//  * the small FP8 and sparse golden cases of the catalog, judged against their stored truth
//    and same_dtype reference;
//  * mutation self-checks: known bugs switched on in the kernel source (wrong FP8 scale block,
//    invalid index read as token 0, invalid index left unmasked, stale rows dequantized) make
//    these checks fail;
//  * every test in both cp.async landing modes (warp_sim.hpp): deferred, where a copy lands at
//    the wait, and eager, where it lands at issue; planted races (one FP8 staging buffer, a
//    missing barrier) must fail in the mode that can see them.
// The simulator models the PTX fragment layouts from their documentation; a GPU run
// (mla_cuda_attention_tests) remains the judge of the real instructions.
#include "warp_sim_builtins.hpp"

#define MLA_HOST_SIM 1
#include "detail/mla_decode_kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <set>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "decode_sim_harness.hpp"
#include "smoke_cases.hpp"
#include "gpu_support.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/split_plan.hpp"
#include "support/attn_builder.hpp"
#include "support/goldens.hpp"

namespace mla::cuda {
namespace {

using simtest::run_sim;
using simtest::SimRun;
using sim::CpAsyncLanding;
namespace dec = detail::decode;

constexpr CpAsyncLanding kModes[] = {CpAsyncLanding::deferred, CpAsyncLanding::eager};

// Sets the landing mode for one test and restores the default after it.
class LandingScope {
 public:
  explicit LandingScope(CpAsyncLanding m) : saved_(sim::cp_async_landing()) { sim::set_cp_async_landing(m); }
  ~LandingScope() { sim::set_cp_async_landing(saved_); }
  LandingScope(const LandingScope&) = delete;
  LandingScope& operator=(const LandingScope&) = delete;

 private:
  CpAsyncLanding saved_;
};

// A test run once per landing mode; the mode is part of the test's name (…/deferred, …/eager).
class InBothModes : public ::testing::TestWithParam<CpAsyncLanding> {
 protected:
  void SetUp() override { scope_.emplace(GetParam()); }
  void TearDown() override { scope_.reset(); }

 private:
  std::optional<LandingScope> scope_;
};
std::string mode_name(const ::testing::TestParamInfo<CpAsyncLanding>& i) { return sim::to_string(i.param); }

struct Case {
  std::string name;
  std::vector<int32_t> lens;
  int s_q, heads;
  bool causal;
  int page_size;
  int forced_splits;  // 0: automatic, on a 4-SM "device" so that it splits
  double q_std;
  uint64_t seed;
  int topk = 0;
  CacheFormat format = CacheFormat::bf16;
  ScaleFmt scale_fmt = ScaleFmt::fp32;
};

void PrintTo(const Case& c, std::ostream* os) {
  // No brackets, commas or semicolons: ctest's label script reads these names as a CMake list.
  *os << c.name << " lengths " << fmt::format("{}", fmt::join(c.lens, " ")) << " s_q " << c.s_q << " heads "
      << c.heads << " forced splits " << c.forced_splits << " topk " << c.topk << " cache "
      << to_string(c.format);
}

constexpr CacheFormat kFp8 = CacheFormat::fp8;
constexpr CacheFormat kBf16 = CacheFormat::bf16;

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
      // Large logits through split and combine (docs/field.md, "Bugs", 3), splits empty for L = 0.
      {"large_logits_split5", {300, 0, 17}, 2, 16, true, 64, 5, 100.0, 6},
      // Non-causal multi-query, page size 1.
      {"noncausal_ps1", {40, 70}, 2, 16, false, 1, 0, 1.0, 7},
      // ---- FP8 cache (656-byte tokens dequantized in shared memory) ----
      // Varlen with partial last tiles (unloaded rows must dequantize to zeros), fp32 scales.
      {"fp8_varlen_h16", {37, 0, 100, 1}, 1, 16, true, 16, 0, 1.0, 11, 0, kFp8, ScaleFmt::fp32},
      // Power-of-two scales, 32-row instance, causal multi-query, forced splits.
      {"fp8_ue8m0_h8_sq3_split2", {70, 5}, 3, 8, true, 7, 2, 1.0, 12, 0, kFp8, ScaleFmt::ue8m0},
      // 64-row tile with padding rows and large logits through the combine.
      {"fp8_large_logits_sq2_h20", {90, 0}, 2, 20, true, 64, 3, 100.0, 13, 0, kFp8, ScaleFmt::fp32},
      // ---- sparse top-k (rows = the heads of one query token) ----
      // topk larger than some sequences (most entries invalid), an empty sequence (every row
      // all-invalid: out 0, lse +inf), s_q 2.
      {"sparse_bf16_sq2_topk40", {100, 0, 9, 64}, 2, 16, false, 16, 0, 1.0, 21, 40},
      // topk over several tiles, forced splits leaving some splits with only invalid indices.
      {"sparse_bf16_h5_topk100_split3", {130, 37}, 1, 5, false, 16, 3, 1.0, 22, 100},
      // 64 heads (64-row tile), odd page size, automatic splits.
      {"sparse_bf16_h64_topk70", {200}, 1, 64, false, 7, 0, 1.0, 23, 70},
      // FP8 and sparse together: invalid indices must neither load nor leave stale rows.
      {"sparse_fp8_sq2_topk48", {80, 5, 0}, 2, 16, false, 16, 0, 1.0, 24, 48, kFp8, ScaleFmt::fp32},
      {"sparse_fp8_ue8m0_h24_topk33_split2", {66}, 1, 24, false, 64, 2, 100.0, 25, 33, kFp8, ScaleFmt::ue8m0},
  };
}

struct Built {
  testing::Logical lg;
  testing::Paged pg;
  AttnInputs in;
};

// FP8 tokens from the builder have nearly equal scales in all four blocks (one distribution);
// multiplying block t's scale by a distinct power of two (exact, for ue8m0 too) makes a kernel
// that picks the wrong block visibly wrong. The poisoned slots' NaN scales stay NaN.
void spread_scales(testing::Paged& pg) {
  const float mul[4] = {1.f, 8.f, 0.125f, 2.f};
  for (std::size_t off = 0; off + 656 <= pg.kv_cache.size(); off += 656) {
    for (int t = 0; t < 4; ++t) {
      float sc;
      std::memcpy(&sc, pg.kv_cache.data() + off + 512 + 4 * t, 4);
      sc *= mul[t];
      std::memcpy(pg.kv_cache.data() + off + 512 + 4 * t, &sc, 4);
    }
  }
}

Built build(const Case& c, const testing::Layout& layout) {
  testing::AttnSpec spec;
  spec.seqlens = c.lens;
  spec.s_q = c.s_q;
  spec.heads = c.heads;
  spec.causal = c.causal;
  spec.q_std = c.q_std;
  spec.seed = c.seed;
  spec.topk = c.topk;
  spec.format = c.format;
  spec.scale_fmt = c.scale_fmt;
  Built b;
  b.lg = testing::make_logical(spec);
  b.pg = testing::lay_out(b.lg, layout);
  if (c.format == kFp8) spread_scales(b.pg);
  b.in = b.pg.inputs();
  return b;
}

::testing::AssertionResult judged(const std::string& what, const SimRun& r, const AttnInputs& in) {
  if (!r.errors.empty()) return ::testing::AssertionFailure() << what << ": " << fmt::format("{}", fmt::join(r.errors, "\n"));
  const gputest::Result truth = gputest::truth_attention(in);
  const gputest::Result same = gputest::same_dtype_attention(in);
  return gputest::matches(what, r.out, in.shape, truth, &same);
}

class DecodeSim : public ::testing::TestWithParam<std::tuple<Case, CpAsyncLanding>> {};

TEST_P(DecodeSim, MatchesTruthAndReadsOnlyValidTokens) {
  const Case& c = std::get<0>(GetParam());
  const LandingScope mode(std::get<1>(GetParam()));
  testing::Layout layout;
  layout.page_size = c.page_size;
  const Built b = build(c, layout);
  const SimRun r = run_sim(b.in, c.forced_splits);
  RecordProperty("plan", r.plan.describe());
  EXPECT_TRUE(judged(c.name, r, b.in));
}

INSTANTIATE_TEST_SUITE_P(Kernel, DecodeSim, ::testing::Combine(::testing::ValuesIn(cases()), ::testing::ValuesIn(kModes)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + sim::to_string(std::get<1>(info.param));
                         });

class DecodeSimInvariance : public InBothModes {};
INSTANTIATE_TEST_SUITE_P(Landing, DecodeSimInvariance, ::testing::ValuesIn(kModes), mode_name);

TEST_P(DecodeSimInvariance, LayoutAndBatchOrderAreBitwiseInvariantAndSplitsAgree) {
  for (const Case& c : {Case{"inv", {37, 0, 130, 5, 64}, 2, 8, true, 16, 0, 1.0, 21},
                        Case{"inv_sparse_fp8", {37, 0, 90, 5}, 2, 8, false, 16, 0, 1.0, 22, 40, kFp8}}) {
    SCOPED_TRACE(c.name);
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
      EXPECT_TRUE(gputest::matches(fmt::format("splits={}", n), rs.out, ba.in.shape, truth));
      EXPECT_TRUE(gputest::matches(fmt::format("splits={} vs automatic", n), rs.out, ba.in.shape, gputest::Result{ra.out.out, ra.out.lse}));
    }
  }
}

class DecodeSimSelfCheck : public InBothModes {};
INSTANTIATE_TEST_SUITE_P(Landing, DecodeSimSelfCheck, ::testing::ValuesIn(kModes), mode_name);

TEST_P(DecodeSimSelfCheck, TheSimulatorCatchesAForbiddenRead) {
  // The read check is what makes "reads only valid tokens" meaningful: remove one token the
  // kernel legitimately reads from the allowed set, and the read must be reported. Dense: the
  // last token of the sequence; sparse FP8: the token of one valid index.
  for (const Case& c : {Case{"self", {40}, 1, 16, true, 16, 0, 1.0, 9},
                        Case{"self_sparse_fp8", {40}, 1, 16, false, 16, 0, 1.0, 9, 20, kFp8}}) {
    SCOPED_TRACE(c.name);
    const Built b = build(c, testing::Layout{});
    const AttnShape& s = b.in.shape;
    std::set<int64_t> slots = simtest::allowed_slots(b.in);
    int32_t t = 39;
    if (c.topk > 0) {
      t = -1;
      for (int32_t idx : b.in.indices)
        if (idx >= 0 && idx < 40) t = idx;
      ASSERT_GE(t, 0) << "the case has no valid index";
    }
    ASSERT_EQ(slots.erase(int64_t{b.in.block_table[static_cast<std::size_t>(t / s.page_size)]} * s.page_size +
                          t % s.page_size),
              1u);
    const SimRun r = run_sim(b.in, 0, 1, &slots);
    ASSERT_FALSE(r.errors.empty()) << "the read of token " << t << " went unnoticed";
    EXPECT_NE(r.errors[0].find("must not touch"), std::string::npos) << r.errors[0];
  }
}

// Each known bug, switched on in the kernel source, must make the checks above fail on a case
// that exercises it: a forbidden read reported by the simulator, or results outside tolerance.
TEST_P(DecodeSimSelfCheck, KnownBugsInTheKernelAreCaught) {
  struct Mut {
    dec::Mutant id;
    const char* what;
    Case c;
  };
  const Mut muts[] = {
      {dec::kWrongScaleBlock, "FP8 latent chunk scaled by the neighbouring block's scale",
       {"m_scale", {70, 33}, 1, 16, true, 16, 0, 1.0, 31, 0, kFp8, ScaleFmt::ue8m0}},
      {dec::kInvalidIndexToZero, "invalid sparse index attends token 0 (docs/field.md, Bugs 8)",
       {"m_zero", {90, 20}, 1, 16, false, 16, 0, 1.0, 32, 40}},
      {dec::kInvalidNotMasked, "invalid sparse index zero-filled but its score kept",
       {"m_mask", {90, 20}, 1, 16, false, 16, 0, 1.0, 33, 40}},
      {dec::kDequantKeepsStale, "FP8 rows of unloaded tokens dequantized from stale shared memory",
       {"m_stale", {45, 70}, 1, 16, true, 16, 0, 1.0, 34, 0, kFp8}},
  };
  for (const Mut& m : muts) {
    SCOPED_TRACE(m.what);
    const Built b = build(m.c, testing::Layout{});
    ASSERT_TRUE(judged("unmutated", run_sim(b.in, 0), b.in)) << "the case must pass before the bug is switched on";
    dec::decode_mutant() = m.id;
    const SimRun r = run_sim(b.in, 0);
    dec::decode_mutant() = dec::kNoMutant;
    EXPECT_FALSE(judged("mutated", r, b.in)) << "the bug went unnoticed";
  }
}

// Races planted in the kernel source, each a bug a pipelined kernel really gets wrong, each run
// in both landing modes. A race is a bug as soon as one landing moment the hardware allows
// breaks the results, so what must hold is that the mode producing that moment catches it:
//  * one raw FP8 staging buffer: tile it+1's copies are issued into the bytes tile it is being
//    dequantized from (write-after-read on a cp.async destination). Only the eager landing
//    overwrites them in time; with the deferred one the copies wait for the next iteration and
//    every other test of this file passes;
//  * no barrier at the top of the main loop, over several tiles: the next tile's slots are
//    written into sSlot while other warps still read the current tile's (write-after-read on
//    plain shared memory), caught in both modes;
//  * the same missing barrier on a one-tile range: the tile is read before every thread's copies
//    of it landed (read-after-write). Only the deferred landing shows it; eager copies landed at
//    issue, which is why the eager mode does not replace the deferred one.
// (A missing barrier between the FP8 dequantization and the MMA reads is not in this list: the
// simulator runs each thread until it blocks, and the warp collective that precedes those reads
// lets every other warp finish its dequantization first; compute-sanitizer's racecheck on a GPU
// is the check for that kind.) The unmutated kernel must pass each case in both modes first.
TEST(DecodeSimPlantedRaces, EachRaceFailsInTheLandingModeThatProducesIt) {
  struct Race {
    dec::Mutant id;
    const char* what;
    Case c;
    bool caught_eager, caught_deferred;  // the failures the test requires (true) or only records
  };
  // Forced single split: the 32-token tiles of a sequence run in one loop, prefetches overlapping.
  const Race races[] = {
      {dec::kSingleStagingBuffer, "FP8: one raw staging buffer for the tile in use and the prefetch",
       {"race_staging", {130, 70}, 1, 16, true, 16, 1, 1.0, 51, 0, kFp8, ScaleFmt::fp32}, true, false},
      {dec::kSingleStagingBuffer, "FP8 sparse: one raw staging buffer",
       {"race_staging_sparse", {130, 37}, 1, 5, false, 16, 1, 1.0, 52, 100, kFp8, ScaleFmt::fp32}, true, false},
      {dec::kNoLoopTopBarrier, "bf16: no loop-top barrier, several tiles (sSlot overwritten while read)",
       {"race_loop_top", {130, 70}, 1, 16, true, 16, 1, 1.0, 54}, true, true},
      {dec::kNoLoopTopBarrier, "bf16: no loop-top barrier, one tile (read before the copies landed)",
       {"race_loop_top_one_tile", {32, 20}, 1, 16, true, 16, 1, 1.0, 55}, false, true},
  };
  for (const Race& r : races) {
    SCOPED_TRACE(r.what);
    const Built b = build(r.c, testing::Layout{});
    for (CpAsyncLanding m : kModes) {
      const LandingScope mode(m);
      ASSERT_TRUE(judged(fmt::format("unmutated, {} landing", sim::to_string(m)), run_sim(b.in, r.c.forced_splits), b.in))
          << "the case must pass before the race is planted";
    }
    bool caught[2] = {};
    for (int i = 0; i < 2; ++i) {
      const LandingScope mode(kModes[i]);
      dec::decode_mutant() = r.id;
      const SimRun run = run_sim(b.in, r.c.forced_splits);
      dec::decode_mutant() = dec::kNoMutant;
      caught[i] = !judged("race", run, b.in);
    }
    RecordProperty(r.c.name, fmt::format("deferred {}, eager {}", caught[0] ? "FAILED" : "passed",
                                         caught[1] ? "FAILED" : "passed"));
    if (r.caught_deferred) {
      EXPECT_TRUE(caught[0]) << "the deferred landing let the race pass";
    }
    if (r.caught_eager) {
      EXPECT_TRUE(caught[1]) << "the eager landing let the race pass";
    }
  }
}

// The device check's smoke problems (suites/device/smoke_cases.hpp) on the kernel source: each
// selects the instance it is named for and passes, in both landing modes, before a GPU run
// spends its first minute on them.
class DecodeSimSmokeProblems : public InBothModes {};
INSTANTIATE_TEST_SUITE_P(Landing, DecodeSimSmokeProblems, ::testing::ValuesIn(kModes), mode_name);

TEST_P(DecodeSimSmokeProblems, EachSelectsItsInstanceAndPasses) {
  const auto all = testing::smoke_instances();
  EXPECT_EQ(all.size(), 12u);  // 3 tiles x 2 cache formats x dense/sparse
  for (const testing::SmokeInstance& c : all) {
    SCOPED_TRACE(c.name);
    const int64_t rows = c.spec.topk > 0 ? c.spec.heads : int64_t{c.spec.s_q} * c.spec.heads;
    EXPECT_EQ(detail::decode_tile_rows(rows), c.tile_rows);
    testing::Layout layout;
    layout.page_size = c.page_size;
    const testing::Logical lg = testing::make_logical(c.spec);
    const testing::Paged pg = testing::lay_out(lg, layout);
    const AttnInputs in = pg.inputs();
    const SimRun r = run_sim(in, c.forced_splits);
    EXPECT_GT(r.plan.combine_blocks, 0) << "two forced splits must run the combine";
    EXPECT_TRUE(judged(c.name, r, in));
  }
}

// The FP8 dequantization against the schema's definition, bf16(fp32(e4m3 value · scale)), for
// every byte (subnormals, ±0, ±448, NaN) and scales across the fast path's range and past it
// (the general decode): bit for bit, lane order included.
TEST(DecodeSimFp8, DequantizationIsTheRoundedExactProductForEveryByte) {
  const float scales[] = {1.0f,          448.0f / 448.0f * 0.00390625f, 2.2321428e-7f /* 1e-4/448 */,
                          0.0038679f,    0.12345679f,                   127.99999f,
                          128.0f,        1000.5f,                       -0.75f,
                          1e-30f /* product subnormal */};
  int checked = 0;
  for (const float sc : scales) {
    for (uint32_t b0 = 0; b0 < 256; ++b0) {
      // Four lanes: the byte itself and three neighbours, so lane placement is checked too.
      const uint32_t bytes[4] = {b0, (b0 + 1) & 0xFF, (b0 + 128) & 0xFF, (b0 * 7 + 3) & 0xFF};
      const uint32_t w = bytes[0] | bytes[1] << 8 | bytes[2] << 16 | bytes[3] << 24;
      const bool fast = std::fabs(sc) < 128.f;
      const uint2 got = dec::dequant4(w, sc, sc * 0x1p120f, fast);
      const uint16_t lanes[4] = {static_cast<uint16_t>(got.x & 0xFFFF), static_cast<uint16_t>(got.x >> 16),
                                 static_cast<uint16_t>(got.y & 0xFFFF), static_cast<uint16_t>(got.y >> 16)};
      for (int k = 0; k < 4; ++k) {
        const double e = e4m3_to_double(static_cast<uint8_t>(bytes[k]));
        const uint16_t want = bf16_from_float(static_cast<float>(e * static_cast<double>(sc)));
        const bool both_nan = std::isnan(e) && (lanes[k] & 0x7FFF) > 0x7F80;
        ASSERT_TRUE(both_nan || lanes[k] == want)
            << fmt::format("byte {:#04x} lane {} scale {:.9g} ({} path): got {:#06x}, want {:#06x}", bytes[k], k, sc,
                           fast ? "fast" : "general", lanes[k], want);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 10 * 256 * 4);
}

// The fast and the general decode inside a whole kernel run: bitwise equal results.
class DecodeSimFp8Paths : public InBothModes {};
INSTANTIATE_TEST_SUITE_P(Landing, DecodeSimFp8Paths, ::testing::ValuesIn(kModes), mode_name);

TEST_P(DecodeSimFp8Paths, FastAndGeneralDecodesGiveBitwiseEqualResults) {
  const Case c{"fp8_paths", {70, 33}, 2, 16, true, 16, 0, 1.0, 41, 0, kFp8, ScaleFmt::fp32};
  const Built b = build(c, testing::Layout{});
  const SimRun fast = run_sim(b.in, 0);
  dec::decode_mutant() = dec::kSlowDequantOnly;
  const SimRun general = run_sim(b.in, 0);
  dec::decode_mutant() = dec::kNoMutant;
  ASSERT_TRUE(fast.errors.empty() && general.errors.empty());
  EXPECT_TRUE(gputest::bitwise_equal("out", fast.out.out, general.out.out));
  EXPECT_TRUE(gputest::bitwise_equal("lse", fast.out.lse, general.out.lse));
}

// The FP8 and sparse golden cases small enough for the simulator, judged against their stored
// truth and same_dtype reference (the larger ones run on the GPU: mla_cuda_golden_tests). A
// missing catalog is a visible skip.
class DecodeSimGoldens : public InBothModes {};
INSTANTIATE_TEST_SUITE_P(Landing, DecodeSimGoldens, ::testing::ValuesIn(kModes), mode_name);

TEST_P(DecodeSimGoldens, SmallFp8AndSparseCasesMatchTheirStoredTruth) {
  std::string why;
  const auto cat = testing::open_goldens(why);
  if (!cat) GTEST_SKIP() << why;
  int ran = 0;
  std::vector<std::string> skipped;
  // Every FP8 or sparse case of the catalog's attention families, whichever family holds it.
  const auto refs = testing::attention_cases(*cat, [](const golden::AttnHeader& h) {
    return h.shape.cache_format == CacheFormat::fp8 || h.shape.topk > 0;
  });
  for (const auto& ref : refs) {
    const std::string id = ref.file + ":" + ref.name;
    const auto c = golden::load_attn_case(cat->file(ref.file), ref.name);
    const AttnInputs in = c.inputs();
    // The simulator costs ~ row tiles × key tiles: today's cases (up to 2·2048 keys × 64 heads)
    // take ~20 s together; anything much larger is left to the GPU.
    const int64_t keys = in.shape.topk > 0
                             ? int64_t{in.shape.topk} * in.shape.s_q
                             : *std::max_element(c.cache_seqlens.begin(), c.cache_seqlens.end()) * in.shape.s_q;
    const int64_t work = int64_t{in.shape.batch} * keys * in.shape.heads;
    if (work > 300 * 1024) {
      skipped.push_back(id);
      continue;
    }
    SCOPED_TRACE(id);
    const SimRun r = run_sim(in, 0);
    ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
    EXPECT_TRUE(gputest::matches(id, r.out, in.shape, c));
    ++ran;
  }
  RecordProperty("ran", ran);
  RecordProperty("left_to_the_gpu", fmt::format("{}", fmt::join(skipped, " ")));
  EXPECT_GT(ran, 0) << "no FP8 or sparse golden case was small enough for the simulator";
}

}  // namespace
}  // namespace mla::cuda
