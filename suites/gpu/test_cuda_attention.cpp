// L1 (GPU): the CUDA attention kernels against the fp64 truth on small synthetic inputs built
// with the counter-based generator and laid out like the goldens (random physical pages, NaN in
// every unused slot, sentinels past each sequence's pages), judged by the tolerance engine with
// the deployed-precision reference arming the error-ratio rule. Outputs start as NaN inside
// guard bands (the implementations' results() refuses any write past either end), so a row
// that is never written or a write out of bounds fails every test here.
//
// Then the metamorphic properties: page permutation, page size and batch order give bitwise
// equal results; different split counts agree within tolerance; repeated runs are bitwise
// identical, also after another problem ran in between (docs/field.md, "Bugs", 12).
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "gpu_support.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/attention.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/cuda/check.hpp"
#include "support/attn_builder.hpp"

namespace mla::gputest {
namespace {

using testing::AttnSpec;
using testing::Layout;

std::unique_ptr<Problem> build(const AttnSpec& spec, const Layout& layout) { return make_problem(spec, layout); }

std::vector<std::unique_ptr<AttentionImpl>> kernels() {
  std::vector<std::unique_ptr<AttentionImpl>> v;
  v.push_back(cuda::make_mla_decode());
  v.push_back(cuda::make_naive_mha_cublas());
  return v;
}

class CudaAttention : public ::testing::TestWithParam<NamedSpec> {};

TEST_P(CudaAttention, MatchesTruth) {
  MLA_SKIP_WITHOUT_CUDA();
  const NamedSpec& c = GetParam();
  Layout layout;
  layout.page_size = c.page_size;
  const auto p = build(c.spec, layout);
  for (const auto& k : kernels()) {
    SCOPED_TRACE(k->info().name);
    MLA_SKIP_IF_UNAVAILABLE(*k);
    ASSERT_EQ(k->check(p->in.shape), std::nullopt);
    const AttnOutputs o = run_once(*k, p->in);
    EXPECT_EQ(o.dtype, k->info().out_dtype);
    EXPECT_TRUE(matches(c.name + " " + k->info().name, o, p->in.shape, p->truth, &p->same));
  }
}

INSTANTIATE_TEST_SUITE_P(Synthetic, CudaAttention, ::testing::ValuesIn(synthetic_cases()),
                         [](const auto& info) { return info.param.name; });

class CudaMlaDecodeFp8Sparse : public ::testing::TestWithParam<NamedSpec> {};

TEST_P(CudaMlaDecodeFp8Sparse, MatchesTruth) {
  MLA_SKIP_WITHOUT_CUDA();
  const NamedSpec& c = GetParam();
  Layout layout;
  layout.page_size = c.page_size;
  const auto p = build(c.spec, layout);
  for (int splits : {0, 3}) {
    const auto k = cuda::make_mla_decode({.forced_splits = splits});
    SCOPED_TRACE(k->info().name);
    MLA_SKIP_IF_UNAVAILABLE(*k);
    ASSERT_EQ(k->check(p->in.shape), std::nullopt);
    const AttnOutputs o = run_once(*k, p->in);
    EXPECT_EQ(o.dtype, OutDType::bf16);
    EXPECT_TRUE(matches(c.name + " " + k->info().name, o, p->in.shape, p->truth, &p->same));
  }
}

INSTANTIATE_TEST_SUITE_P(Synthetic, CudaMlaDecodeFp8Sparse, ::testing::ValuesIn(fp8_sparse_cases()),
                         [](const auto& info) { return info.param.name; });

AttnSpec invariance_spec() {
  AttnSpec s;
  s.seqlens = {37, 0, 130, 1000, 5, 64};
  s.s_q = 2;
  s.heads = 16;
  s.seed = 21;
  return s;
}

TEST(CudaAttentionInvariance, PagePermutationAndPageSizeAreBitwiseInvariant) {
  MLA_SKIP_WITHOUT_CUDA();
  const AttnSpec spec = invariance_spec();
  const testing::Logical lg = testing::make_logical(spec);
  // Same logical problem: other physical block permutations, another page size, extra unused
  // (poisoned) blocks and sentinel entries.
  std::vector<Layout> layouts(4);
  layouts[0].page_size = 16;
  layouts[1].page_size = 16;
  layouts[1].perm_seed = 99;
  layouts[2].page_size = 64;
  layouts[2].perm_seed = 5;
  layouts[3].page_size = 3;
  layouts[3].spare_blocks = 11;
  layouts[3].spare_table = 5;
  for (const auto& k : kernels()) {
    SCOPED_TRACE(k->info().name);
    MLA_SKIP_IF_UNAVAILABLE(*k);
    std::vector<AttnOutputs> r;
    for (const Layout& l : layouts) {
      const testing::Paged pg = testing::lay_out(lg, l);
      r.push_back(run_once(*k, pg.inputs()));
    }
    for (std::size_t i = 1; i < r.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(fmt::format("out, layout {} vs 0", i), r[i].out, r[0].out));
      EXPECT_TRUE(bitwise_equal(fmt::format("lse, layout {} vs 0", i), r[i].lse, r[0].lse));
    }
  }
}

TEST(CudaAttentionInvariance, BatchPermutationIsBitwiseInvariant) {
  MLA_SKIP_WITHOUT_CUDA();
  const AttnSpec spec = invariance_spec();
  const testing::Logical lg = testing::make_logical(spec);
  const int B = static_cast<int>(spec.seqlens.size());
  Layout id;
  Layout perm;
  for (int64_t i : gen::permutation(33, 0, B)) perm.order.push_back(static_cast<int>(i));
  const testing::Paged a = testing::lay_out(lg, id), b = testing::lay_out(lg, perm);
  const int64_t out_row = int64_t{spec.s_q} * spec.heads * 512, lse_row = int64_t{spec.heads} * spec.s_q;
  for (const auto& k : kernels()) {
    SCOPED_TRACE(k->info().name);
    MLA_SKIP_IF_UNAVAILABLE(*k);
    const AttnOutputs ra = run_once(*k, a.inputs()), rb = run_once(*k, b.inputs());
    for (int i = 0; i < B; ++i) {
      const int o = perm.order[static_cast<std::size_t>(i)];  // built sequence i is logical o
      auto slice = [](const std::vector<double>& v, int64_t idx, int64_t n) {
        return std::span<const double>(v).subspan(static_cast<std::size_t>(idx * n), static_cast<std::size_t>(n));
      };
      EXPECT_TRUE(bitwise_equal(fmt::format("out of sequence {}", o), slice(rb.out, i, out_row), slice(ra.out, o, out_row)));
      EXPECT_TRUE(bitwise_equal(fmt::format("lse of sequence {}", o), slice(rb.lse, i, lse_row), slice(ra.lse, o, lse_row)));
    }
  }
}

TEST(CudaAttentionSplits, ForcedSplitCountsAgree) {
  MLA_SKIP_WITHOUT_CUDA();
  // Lengths below, at and above the split counts, so some splits are empty (bug 1), causal
  // multi-query rows whose keys end inside a split, and large logits (bug 3).
  for (double q_std : {1.0, 100.0}) {
    AttnSpec spec;
    spec.seqlens = {0, 1, 31, 33, 200, 1000};
    spec.s_q = 2;
    spec.heads = 16;
    spec.q_std = q_std;
    spec.seed = 40 + static_cast<uint64_t>(q_std);
    const auto p = build(spec, Layout{});
    SCOPED_TRACE(fmt::format("q_std {}", q_std));
    const auto one = cuda::make_mla_decode({.forced_splits = 1});
    MLA_SKIP_IF_UNAVAILABLE(*one);
    const AttnOutputs base = run_once(*one, p->in);
    EXPECT_TRUE(matches("splits=1", base, p->in.shape, p->truth, &p->same));
    for (int n : {2, 3, 5, 16, 64}) {
      const auto k = cuda::make_mla_decode({.forced_splits = n});
      const AttnOutputs o = run_once(*k, p->in);
      const std::string what = fmt::format("splits={}", n);
      EXPECT_TRUE(matches(what, o, p->in.shape, p->truth, &p->same));
      // And against the unsplit kernel: the two differ only by fp32 rounding of the combine
      // and bf16 rounding of the outputs, within the same bf16 bounds.
      EXPECT_TRUE(matches(what + " vs splits=1", o, p->in.shape, Result{base.out, base.lse}));
    }
  }
}

TEST(CudaAttentionRepeat, RepeatedRunsAreBitwiseIdenticalAndStateDoesNotLeak) {
  MLA_SKIP_WITHOUT_CUDA();
  const auto p = build(invariance_spec(), Layout{});
  AttnSpec other_spec;
  other_spec.seqlens = {3000, 0};
  other_spec.s_q = 1;
  other_spec.heads = 128;
  other_spec.q_std = 100.0;
  other_spec.seed = 77;
  const testing::Paged other = testing::lay_out(testing::make_logical(other_spec), Layout{});
  for (const auto& k : kernels()) {
    SCOPED_TRACE(k->info().name);
    MLA_SKIP_IF_UNAVAILABLE(*k);
    auto prepared = k->prepare(p->in);
    prepared->run();
    const AttnOutputs first = prepared->results();
    for (int rep = 0; rep < 3; ++rep) {
      prepared->run();
      prepared->synchronize();
      const AttnOutputs again = prepared->results();
      EXPECT_TRUE(bitwise_equal(fmt::format("out, run {}", rep + 2), again.out, first.out));
      EXPECT_TRUE(bitwise_equal(fmt::format("lse, run {}", rep + 2), again.lse, first.lse));
    }
    // Another problem in between (other shape, long, large logits), then a fresh preparation.
    (void)run_once(*k, other.inputs());
    const AttnOutputs fresh = run_once(*k, p->in);
    EXPECT_TRUE(bitwise_equal("out after another problem", fresh.out, first.out));
    EXPECT_TRUE(bitwise_equal("lse after another problem", fresh.lse, first.lse));
    EXPECT_TRUE(matches("repeat", first, p->in.shape, p->truth, &p->same));
  }
}

TEST(CudaAttentionGuards, ResultsBeforeRunIsAnError) {
  MLA_SKIP_WITHOUT_CUDA();
  const auto p = build(invariance_spec(), Layout{});
  for (const auto& k : kernels()) {
    MLA_SKIP_IF_UNAVAILABLE(*k);
    auto prepared = k->prepare(p->in);
    EXPECT_THROW((void)prepared->results(), Error) << k->info().name;
  }
}

TEST(CudaAttentionGuards, GuardBandsDetectOutOfBoundsWrites) {
  MLA_SKIP_WITHOUT_CUDA();
  // The detector the implementations rely on, shown to fire: one byte written just past the
  // payload and one just before it.
  for (const std::ptrdiff_t offset : {std::ptrdiff_t{1000}, std::ptrdiff_t{-1}}) {
    cuda::DeviceBuffer b(1000, /*guarded=*/true);
    EXPECT_EQ(b.guard_damage("probe"), std::nullopt);
    MLA_CUDA_CHECK(cudaMemset(b.as<unsigned char>() + offset, 0x00, 1));
    const auto damage = b.guard_damage("probe");
    ASSERT_TRUE(damage.has_value()) << "offset " << offset;
    EXPECT_NE(damage->find(offset < 0 ? "before" : "after"), std::string::npos) << *damage;
  }
}

}  // namespace
}  // namespace mla::gputest
