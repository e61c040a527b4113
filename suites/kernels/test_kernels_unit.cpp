// L0 tests of the kernel registry, the capability check, the cost model and every registered
// CPU implementation: correctness against the plain-loop oracle, and the layout properties a
// kernel must have (paged == contiguous, page-permutation and batch-permutation invariance,
// bitwise repeatability with no state carried between calls).
#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/isa.hpp"
#include "mla/core/threads.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/faults/faults.hpp"
#include "mla/ref/same_dtype.hpp"
#include "mla/registry/registry.hpp"
#include "support/attn_builder.hpp"
#include "support/expect.hpp"

namespace mla {
namespace {

using testing::AttnSpec;
using testing::bitwise_equal;
using testing::judged;
using testing::Layout;

AttnOutputs run_once(const AttentionImpl& k, const AttnInputs& in) {
  auto p = k.prepare(in);
  p->run();
  p->synchronize();
  return p->results();
}

// Fails the test (not the process) when the builtin kernel is missing.
const AttentionImpl& builtin(const char* name) {
  register_builtin_kernels();
  const AttentionImpl* k = Registry::instance().find(name);
  if (!k) throw Error(fmt::format("builtin kernel '{}' is not registered", name));
  return *k;
}

std::vector<const AttentionImpl*> cpu_kernels() {
  register_builtin_kernels();
  std::vector<const AttentionImpl*> v;
  for (const auto& k : Registry::instance().attention()) {
    if (k->info().backend == "cpu") v.push_back(k.get());
  }
  // Never let a per-kernel loop pass by running over nothing.
  if (v.size() < 3) throw Error(fmt::format("expected the 3 builtin CPU kernels, found {}", v.size()));
  return v;
}

// ---------------------------------------------------------------------------- threads and ISA

// The host kernels split their work by sequence (dense) or query token (sparse), fixed by the
// problem: the bits must not depend on the thread count. Every ISA path of their products stays
// within the bounds their dtype is judged by against the fp64 plain loops.
TEST(HostKernels, ThreadCountDoesNotChangeABitAndEveryIsaPasses) {
  struct Restore {
    ~Restore() {
      set_threads(0);
      set_simd_isa(std::nullopt);
    }
  } restore;
  AttnSpec dense;
  dense.seqlens = {37, 0, 130, 5};
  dense.s_q = 2;
  AttnSpec sparse;
  sparse.topk = 16;
  sparse.s_q = 3;
  AttnSpec fp8 = dense;
  fp8.format = CacheFormat::fp8;
  for (const AttnSpec& spec : {dense, sparse, fp8}) {
    const auto lg = testing::make_logical(spec);
    const auto p = testing::lay_out(lg, {});
    const auto want = testing::oracle(lg);
    AttentionTruth truth;
    truth.out = want.out;
    truth.lse = want.lse;
    for (const AttentionImpl* k : cpu_kernels()) {
      SCOPED_TRACE(k->info().name + (spec.topk ? " sparse" : " dense") + (spec.format == CacheFormat::fp8 ? " fp8" : ""));
      set_simd_isa(std::nullopt);
      set_threads(1);
      const AttnOutputs one = run_once(*k, p.inputs());
      set_threads(3);
      const AttnOutputs three = run_once(*k, p.inputs());
      EXPECT_TRUE(bitwise_equal("out", one.out, three.out));
      EXPECT_TRUE(bitwise_equal("lse", one.lse, three.lse));
      for (SimdIsa isa : {SimdIsa::sse2, SimdIsa::avx2, SimdIsa::avx512}) {
        if (!cpu_supports(isa)) continue;
        set_simd_isa(isa);
        EXPECT_TRUE(testing::matches(std::string("vs plain loops, ") + to_string(isa), run_once(*k, p.inputs()), p.shape,
                                     truth));
      }
    }
  }
}

// ---------------------------------------------------------------------------- registry

TEST(Registry, BuiltinsAreRegisteredOnce) {
  register_builtin_kernels();
  const std::size_t n = Registry::instance().attention().size();
  register_builtin_kernels();
  EXPECT_EQ(Registry::instance().attention().size(), n);
  for (const char* name : {"cpu_mla_fp64", "cpu_naive_mha_fp64", "cpu_naive_mha_fp32"}) {
    const AttentionImpl* k = Registry::instance().find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->info().name, name);
    EXPECT_EQ(k->info().backend, "cpu");
    EXPECT_FALSE(k->unavailable().has_value()) << name;
  }
  EXPECT_EQ(Registry::instance().find("cpu_mla_fp64")->info().out_dtype, OutDType::f64);
  EXPECT_EQ(Registry::instance().find("cpu_naive_mha_fp32")->info().out_dtype, OutDType::f32);
  EXPECT_EQ(Registry::instance().find("no_such_kernel"), nullptr);
  // The fault kernels are for self-tests only and must never be certified by accident.
  for (const auto& name : faults::names()) EXPECT_EQ(Registry::instance().find(faults::make(name)->info().name), nullptr);
  // Roles are declared by each entry, never read off a name.
  EXPECT_EQ(Registry::instance().find("cpu_mla_fp64")->info().role, KernelRole::oracle);
  EXPECT_EQ(Registry::instance().find("cpu_naive_mha_fp64")->info().role, KernelRole::baseline);
  EXPECT_EQ(Registry::instance().find("cpu_naive_mha_fp32")->info().role, KernelRole::baseline);
}

class NamedFake final : public AttentionImpl {
 public:
  explicit NamedFake(std::string name) { info_.name = std::move(name); }
  const KernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedAttention> prepare(const AttnInputs&) const override {
    throw UnsupportedError("fake");
  }

 private:
  KernelInfo info_;
};

TEST(Registry, RejectsDuplicatesNullAndBadNames) {
  Registry r;
  r.add(std::make_unique<NamedFake>("good_name_1"));
  EXPECT_THROW(r.add(std::make_unique<NamedFake>("good_name_1")), Error);
  EXPECT_THROW(r.add(std::make_unique<NamedFake>("Bad-Name")), Error);
  EXPECT_THROW(r.add(std::make_unique<NamedFake>("")), Error);
  EXPECT_THROW(r.add(std::unique_ptr<AttentionImpl>{}), Error);
  EXPECT_THROW(r.add(std::unique_ptr<PrefillImpl>{}), Error);
  EXPECT_THROW(r.add(std::unique_ptr<MergeImpl>{}), Error);
  EXPECT_EQ(r.attention().size(), 1u);
}

// ---------------------------------------------------------------------------- capabilities

TEST(Capabilities, ReasonsNameTheProblem) {
  Capabilities caps;
  caps.cache_formats = {CacheFormat::bf16};
  AttnShape sh;
  sh.batch = 1;
  sh.s_q = 1;
  sh.heads = 16;
  sh.page_size = 64;
  EXPECT_EQ(check_capabilities(caps, sh), std::nullopt);
  auto with = [&](auto f) {
    AttnShape s = sh;
    f(s);
    return check_capabilities(caps, s).value_or("<none>");
  };
  EXPECT_EQ(with([](AttnShape& s) { s.heads = 200; }), "heads=200 outside [1,128]");
  EXPECT_EQ(with([](AttnShape& s) { s.s_q = 65; }), "s_q=65 outside [1,64]");
  EXPECT_EQ(with([](AttnShape& s) { s.cache_format = CacheFormat::fp8; }), "cache format fp8 not supported");
  EXPECT_EQ(with([](AttnShape& s) { s.topk = 2048; }), "sparse not supported");
  caps.page_sizes = {64};
  EXPECT_EQ(with([](AttnShape& s) { s.page_size = 16; }), "page_size=16 not in {64}");
  EXPECT_EQ(with([](AttnShape& s) {
              s.heads = 0;
              s.topk = 1;
            }),
            "heads=0 outside [1,128]; sparse not supported");
}

TEST(Capabilities, KernelsRefuseOutsideTheirCapabilities) {
  AttnSpec spec;
  const auto p = testing::lay_out(testing::make_logical(spec), {});
  for (const AttentionImpl* k : cpu_kernels()) {
    AttnInputs in = p.inputs();
    in.shape.heads = 200;
    EXPECT_EQ(k->check(in.shape).value_or(""), "heads=200 outside [1,128]") << k->info().name;
    try {
      k->prepare(in);
      ADD_FAILURE() << k->info().name << " accepted 200 heads";
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find("heads=200 outside [1,128]"), std::string::npos) << e.what();
    }
    in.shape.heads = p.shape.heads;
    in.shape.s_q = 65;
    EXPECT_THROW(k->prepare(in), UnsupportedError) << k->info().name;
  }
}

// ---------------------------------------------------------------------------- cost model

TEST(CostModel, DenseCausalByHand) {
  AttnSpec spec;
  spec.seqlens = {10, 0};
  spec.s_q = 2;
  spec.heads = 4;
  const auto p = testing::lay_out(testing::make_logical(spec), {});
  const AttnInputs in = p.inputs();
  // q 2·2·4·576·2 = 18432; cache 10 tokens · 1152 = 11520; out (bf16) 16·512·2 = 16384; lse 16·4.
  // Pairs: query 0 sees 9 tokens, query 1 sees 10 -> 19; FLOPs 2·19·4·1088.
  const CostModel c = mla_cost_model(in);
  EXPECT_EQ(c.bytes, 18432.0 + 11520.0 + 16384.0 + 64.0);
  EXPECT_EQ(c.flops, 2.0 * 19 * 4 * 1088);
  // f64 outputs: 8 bytes per value.
  EXPECT_EQ(mla_cost_model(in, OutDType::f64).bytes, 18432.0 + 11520.0 + 16 * 512 * 8.0 + 64.0);
  EXPECT_EQ(builtin("cpu_mla_fp64").cost(in).bytes, mla_cost_model(in, OutDType::f64).bytes);
}

TEST(CostModel, SparseCountsDistinctValidTokensPerSequence) {
  AttnSpec spec;
  spec.seqlens = {20};
  spec.s_q = 2;
  spec.heads = 2;
  spec.topk = 4;
  spec.format = CacheFormat::fp8;
  auto lg = testing::make_logical(spec);
  lg.indices[0] = {3, 5, -1, 20, /* row 1 */ 5, 7, 19, 2147483647};
  const auto p = testing::lay_out(lg, {});
  const AttnInputs in = p.inputs();
  const AttnTraffic t = attention_traffic(in);
  EXPECT_EQ(t.tokens, 4);  // {3, 5, 7, 19}
  EXPECT_EQ(t.pairs, 5);   // 2 + 3 valid entries
  const CostModel c = mla_cost_model(in);
  // q 1·2·2·576·2; 4 fp8 tokens; out (bf16) 4 rows·512·2; lse 4 rows·4.
  EXPECT_EQ(c.bytes, 4 * 576 * 2.0 + 4 * 656.0 + 4 * 512 * 2.0 + 4 * 4.0);
  EXPECT_EQ(c.flops, 2.0 * 5 * 2 * 1088);
  // The naive MHA reads K/V decompressed to T: strictly more bytes, the same FLOPs.
  const CostModel naive = builtin("cpu_naive_mha_fp32").cost(in);
  EXPECT_GT(naive.bytes, c.bytes);
  EXPECT_EQ(naive.flops, c.flops);
}

TEST(CostModel, BytesPerTokenMatchDocsField) {
  EXPECT_EQ(cache_bytes_per_token(CacheFormat::bf16), 1152u);
  EXPECT_EQ(cache_bytes_per_token(CacheFormat::fp8), 656u);
  EXPECT_STREQ(to_string(CacheFormat::fp8), "fp8");
  EXPECT_STREQ(to_string(OutDType::f32), "f32");
}

// ---------------------------------------------------------------------------- every CPU kernel

struct KCase {
  const char* name;
  AttnSpec spec;
};

void PrintTo(const KCase& c, std::ostream* os) { *os << c.name; }

std::vector<KCase> kernel_cases() {
  std::vector<KCase> v;
  AttnSpec dense;
  dense.seqlens = {37, 0, 130, 1};
  v.push_back({"dense_bf16_varlen", dense});
  AttnSpec mtp = dense;
  mtp.s_q = 3;
  mtp.seqlens = {37, 2, 70};
  mtp.heads = 5;
  v.push_back({"dense_bf16_causal_sq3", mtp});
  AttnSpec sparse = dense;
  sparse.topk = 20;
  sparse.s_q = 2;
  v.push_back({"sparse_bf16", sparse});
  AttnSpec fp8 = mtp;
  fp8.format = CacheFormat::fp8;
  v.push_back({"dense_fp8", fp8});
  AttnSpec fp8s = sparse;
  fp8s.format = CacheFormat::fp8;
  fp8s.scale_fmt = ScaleFmt::ue8m0;
  v.push_back({"sparse_fp8_ue8m0", fp8s});
  return v;
}

class EveryCpuKernel : public ::testing::TestWithParam<KCase> {};

TEST_P(EveryCpuKernel, MatchesOracle) {
  const auto lg = testing::make_logical(GetParam().spec);
  const auto p = testing::lay_out(lg, {});
  const auto want = testing::oracle(lg);
  // Judged as the certifier judges: the plain-loop oracle as the truth, the deployed-precision
  // reference arming the error-ratio rule.
  const auto same = ref::attention_same_dtype(p.inputs());
  AttentionTruth truth;
  truth.out = want.out;
  truth.lse = want.lse;
  truth.same_dtype_out = same.out;
  truth.same_dtype_lse = same.lse;
  for (const AttentionImpl* k : cpu_kernels()) {
    const AttnOutputs o = run_once(*k, p.inputs());
    EXPECT_TRUE(testing::matches(k->info().name, o, p.shape, truth, k->info().out_dtype));
  }
}

TEST_P(EveryCpuKernel, PagedEqualsContiguousAndIgnoresPagePermutation) {
  const auto lg = testing::make_logical(GetParam().spec);
  Layout paged;
  paged.page_size = 16;
  Layout shuffled = paged;
  shuffled.perm_seed = 12345;
  Layout contiguous;  // one block per sequence
  contiguous.page_size = *std::max_element(lg.spec.seqlens.begin(), lg.spec.seqlens.end());
  contiguous.spare_blocks = 0;
  contiguous.spare_table = 0;
  Layout odd = paged;  // a page size that divides nothing
  odd.page_size = 3;
  const auto a = testing::lay_out(lg, paged), b = testing::lay_out(lg, shuffled),
             c = testing::lay_out(lg, contiguous), d = testing::lay_out(lg, odd);
  ASSERT_NE(a.block_table, b.block_table);
  for (const AttentionImpl* k : cpu_kernels()) {
    const auto ra = run_once(*k, a.inputs());
    for (const auto* other : {&b, &c, &d}) {
      const auto ro = run_once(*k, other->inputs());
      const std::string what = fmt::format("{} page_size {} vs {} (perm)", k->info().name, a.shape.page_size,
                                           other->shape.page_size);
      EXPECT_TRUE(bitwise_equal(what + " out", ra.out, ro.out));
      EXPECT_TRUE(bitwise_equal(what + " lse", ra.lse, ro.lse));
    }
  }
}

TEST_P(EveryCpuKernel, IgnoresBatchOrder) {
  const auto lg = testing::make_logical(GetParam().spec);
  const int B = static_cast<int>(lg.spec.seqlens.size());
  std::vector<int> order(static_cast<std::size_t>(B));
  for (int i = 0; i < B; ++i) order[static_cast<std::size_t>(i)] = (i + 1) % B;
  std::reverse(order.begin(), order.end());
  Layout fwd, perm;
  perm.order = order;
  const auto a = testing::lay_out(lg, fwd), b = testing::lay_out(lg, perm);
  const int64_t row_out = int64_t{lg.spec.s_q} * lg.spec.heads * 512, row_lse = int64_t{lg.spec.heads} * lg.spec.s_q;
  for (const AttentionImpl* k : cpu_kernels()) {
    const auto ra = run_once(*k, a.inputs()), rb = run_once(*k, b.inputs());
    for (int i = 0; i < B; ++i) {
      const int o = order[static_cast<std::size_t>(i)];
      const std::span<const double> out_a(ra.out.data() + o * row_out, static_cast<std::size_t>(row_out));
      const std::span<const double> out_b(rb.out.data() + i * row_out, static_cast<std::size_t>(row_out));
      const std::span<const double> lse_a(ra.lse.data() + o * row_lse, static_cast<std::size_t>(row_lse));
      const std::span<const double> lse_b(rb.lse.data() + i * row_lse, static_cast<std::size_t>(row_lse));
      EXPECT_TRUE(bitwise_equal(fmt::format("{} sequence {} out", k->info().name, o), out_a, out_b));
      EXPECT_TRUE(bitwise_equal(fmt::format("{} sequence {} lse", k->info().name, o), lse_a, lse_b));
    }
  }
}

TEST_P(EveryCpuKernel, RepeatsBitwiseWithNoStateBetweenCalls) {
  const auto lg = testing::make_logical(GetParam().spec);
  const auto p = testing::lay_out(lg, {});
  AttnSpec other_spec = GetParam().spec;  // a different problem run in between
  other_spec.seed = 99;
  other_spec.q_std = 30;
  const auto other = testing::lay_out(testing::make_logical(other_spec), {});
  for (const AttentionImpl* k : cpu_kernels()) {
    auto prep = k->prepare(p.inputs());
    prep->run();
    const auto first = prep->results();
    prep->run();
    const auto second = prep->results();
    (void)run_once(*k, other.inputs());
    const auto third = run_once(*k, p.inputs());
    for (const auto* r : {&second, &third}) {
      EXPECT_TRUE(bitwise_equal(k->info().name + " out", first.out, r->out));
      EXPECT_TRUE(bitwise_equal(k->info().name + " lse", first.lse, r->lse));
    }
  }
}

TEST_P(EveryCpuKernel, PreparedCallOwnsItsInputs) {
  const auto lg = testing::make_logical(GetParam().spec);
  auto p = testing::lay_out(lg, {});
  for (const AttentionImpl* k : cpu_kernels()) {
    const auto want = run_once(*k, p.inputs());
    auto scratch = p;
    auto prep = k->prepare(scratch.inputs());
    std::fill(scratch.q.begin(), scratch.q.end(), uint16_t{0x7FC0});  // caller reuses its buffers
    std::fill(scratch.kv_cache.begin(), scratch.kv_cache.end(), uint8_t{0x7F});
    prep->run();
    EXPECT_TRUE(bitwise_equal(k->info().name + " out", prep->results().out, want.out));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, EveryCpuKernel, ::testing::ValuesIn(kernel_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CpuKernels, ResultsBeforeRunIsAnError) {
  const auto p = testing::lay_out(testing::make_logical(AttnSpec{}), {});
  for (const AttentionImpl* k : cpu_kernels()) EXPECT_THROW(k->prepare(p.inputs())->results(), Error);
}

// ---------------------------------------------------------------------------- fault kernels

TEST(Faults, DroppedLastTokenIsExactlyThatBug) {
  const auto bad = faults::make("dropped_last");
  EXPECT_EQ(bad->info().name, "cpu_mla_fp64_dropped_last_token");
  const AttentionImpl& good = builtin("cpu_mla_fp64");

  // Decode (s_q 1): dropping the last token == the correct kernel on lengths L-1.
  AttnSpec spec;
  spec.seqlens = {37, 1, 130};
  const auto p = testing::lay_out(testing::make_logical(spec), {});
  auto shorter = p;
  for (auto& L : shorter.cache_seqlens) L = std::max(L - 1, 0);
  const auto rb = run_once(*bad, p.inputs());
  const auto rg = run_once(good, shorter.inputs());
  EXPECT_TRUE(bitwise_equal("out", rb.out, rg.out));
  EXPECT_TRUE(bitwise_equal("lse", rb.lse, rg.lse));
  // ... and the judge sees it as wrong.
  const auto truth = run_once(good, p.inputs());
  AttentionTruth t;
  t.out = truth.out;
  t.lse = truth.lse;
  EXPECT_FALSE(testing::matches("dropped last token", rb, p.shape, t));

  // Multi-token causal decode keeps its alignment: with s_q 2, row 0 sees 0..L-2 either way and
  // row 1 loses L-1, which is what the correct kernel computes non-causally on lengths L-1.
  AttnSpec sq2 = spec;
  sq2.s_q = 2;
  const auto p2 = testing::lay_out(testing::make_logical(sq2), {});
  auto shorter2 = p2;
  for (auto& L : shorter2.cache_seqlens) L = std::max(L - 1, 0);
  shorter2.shape.causal = false;
  const auto rg2 = run_once(good, shorter2.inputs());
  AttentionTruth t2;
  t2.out = rg2.out;
  t2.lse = rg2.lse;
  EXPECT_TRUE(testing::matches("dropped last token, s_q 2", run_once(*bad, p2.inputs()), p2.shape, t2));

  // Sparse: the same as the correct kernel with every index L-1 made invalid.
  AttnSpec sp = spec;
  sp.topk = 40;
  sp.seqlens = {37, 1, 30};
  auto lg = testing::make_logical(sp);
  lg.indices[2][0] = 29;  // make sure position L-1 is selected somewhere
  for (std::size_t k = 1; k < lg.indices[2].size(); ++k) {
    if (lg.indices[2][k] == 29) lg.indices[2][k] = -1;
  }
  const auto ps = testing::lay_out(lg, {});
  auto masked = ps;
  for (int b = 0; b < 3; ++b) {
    for (int k = 0; k < sp.topk; ++k) {
      int32_t& idx = masked.indices[static_cast<std::size_t>(b * sp.topk + k)];
      if (idx == ps.cache_seqlens[static_cast<std::size_t>(b)] - 1) idx = -1;
    }
  }
  EXPECT_TRUE(bitwise_equal("sparse out", run_once(*bad, ps.inputs()).out, run_once(good, masked.inputs()).out));
}

}  // namespace
}  // namespace mla
