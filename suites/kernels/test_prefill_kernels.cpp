// L1: every registered prefill implementation (mla/core/prefill_kernel.hpp) over every case of
// the prefill goldens, called as the host calls one (inputs in its declared conventions, outputs
// made canonical) and judged by judge_prefill against the fp64 truth with the golden bf16
// pipeline as the ratio rule's reference; and what the interface promises of each: repeatable,
// thread-count independent bits, a refusal for a shape outside its claims.
#include <gtest/gtest.h>

#include <cstring>

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/prefill.hpp"
#include "mla/registry/registry.hpp"
#include "support/goldens.hpp"
#include "support/host_call.hpp"

namespace mla {
namespace {


using testing::call_prefill;

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(PrefillKernels, EveryRegisteredImplementationPassesEveryPrefillGolden) {
  register_builtin_kernels();
  const auto cases = testing::stored_prefill_cases();
  if (cases.empty()) GTEST_SKIP() << "no golden catalog";
  ASSERT_FALSE(Registry::instance().prefill().empty());
  for (const auto& k : Registry::instance().prefill()) {
    if (k->unavailable()) continue;  // a CUDA one without a device: its own tests say so
    int judged = 0;
    for (const auto& c : cases) {
      SCOPED_TRACE(k->info().name + " on " + c.name);
      if (auto why = k->check(c.inputs())) {
        ADD_FAILURE() << "a built-in prefill kernel refuses a stored case: " << *why;
        continue;
      }
      const auto j = testing::judge_prefill_case(k->info(), c, call_prefill(*k, c.inputs()));
      EXPECT_TRUE(j.pass()) << (j.reasons.empty() ? "" : j.reasons.front());
      ++judged;
    }
    EXPECT_EQ(judged, static_cast<int>(cases.size())) << k->info().name;
  }
}

TEST(PrefillKernels, ResultsRepeatAndDoNotDependOnTheThreadCount) {
  register_builtin_kernels();
  const auto cases = testing::stored_prefill_cases();
  if (cases.empty()) GTEST_SKIP() << "no golden catalog";
  // The longest case: several row blocks and key chunks, so threads really split it.
  const auto* longest = &cases.front();
  for (const auto& c : cases) {
    if (prefill_attended_pairs(c.inputs()) > prefill_attended_pairs(longest->inputs())) longest = &c;
  }
  for (const auto& k : Registry::instance().prefill()) {
    if (k->unavailable()) continue;
    SCOPED_TRACE(k->info().name + " on " + longest->name);
    auto p = k->prepare(longest->inputs());
    p->run();
    const auto first = p->results();
    p->run();
    const auto again = p->results();
    EXPECT_TRUE(same_bits(first.out, again.out) && same_bits(first.lse, again.lse)) << "a second run() differs";
    const int before = threads();
    set_threads(1);
    const auto one = call_prefill(*k, longest->inputs());
    set_threads(before);
    EXPECT_TRUE(same_bits(first.out, one.out) && same_bits(first.lse, one.lse)) << "one thread differs from " << before;
  }
}

TEST(PrefillKernels, AShapeOutsideTheClaimsIsRefusedNamingIt) {
  register_builtin_kernels();
  PrefillBuffers b;
  b.shape = {1, 2, 1, 1, kMhaDqk, 512, true};
  b.softmax_scale = 0.1;
  b.q.assign(2 * kMhaDqk, 0);
  b.k.assign(2 * kMhaDqk, 0);
  b.v.assign(2 * 512, 0);
  b.cu_seqlens_q = {0, 1};
  b.cu_seqlens_k = {0, 1};
  for (const auto& k : Registry::instance().prefill()) {
    SCOPED_TRACE(k->info().name);
    const auto why = k->check(b.view());
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("d_v=512"), std::string::npos) << *why;
    EXPECT_THROW((void)k->prepare(b.view()), UnsupportedError);
  }
}

TEST(PrefillKernels, ANameIsUniqueAcrossTheRegistrysLists) {
  register_builtin_kernels();
  Registry fresh;
  add_builtin_kernels(fresh);
  EXPECT_NE(fresh.find_prefill("cpu_prefill_fp64"), nullptr);
  // A decode kernel may not take a prefill kernel's name, nor the other way round.
  struct Named final : PrefillImpl {
    PrefillKernelInfo i;
    explicit Named(std::string n) { i.name = std::move(n); }
    const PrefillKernelInfo& info() const override { return i; }
    std::unique_ptr<PreparedPrefill> prepare(const PrefillInputs&) const override { return nullptr; }
  };
  EXPECT_THROW(fresh.add(std::make_unique<Named>(Registry::instance().attention().front()->info().name)), Error);
  EXPECT_THROW(fresh.add(std::make_unique<Named>("cpu_prefill_fp64")), Error);
  EXPECT_THROW(fresh.add(std::make_unique<Named>("Bad Name")), Error);
}

}  // namespace
}  // namespace mla
