// L1: every registered merge-of-states implementation (mla/core/merge.hpp) over every case of the
// merge goldens, called as the host calls one (lse in its declared conventions, outputs made
// canonical) and judged by judge_merge against the fp64 truth; the merge.* entries of the
// tolerance table against their witnesses (the golden deployed arithmetic and the float32
// baseline use at most half of every bound). The planted merge bugs are kernels/faults' (their
// mutation score: test_prefill_merge_faults.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "mla/core/error.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/merge.hpp"
#include "mla/registry/registry.hpp"
#include "support/host_call.hpp"
#include "support/refused.hpp"

namespace mla {
namespace {

namespace fs = std::filesystem;

struct Case {
  golden::MergeCase c;
  MergeBuffers in;
};

std::vector<Case> merge_cases() {
  std::vector<Case> cases;
  const fs::path dir = golden::default_goldens_dir();
  if (!fs::exists(dir / "MANIFEST.sha256")) return cases;
  const auto catalog = golden::open_catalog(dir);
  for (const auto& fam : golden::family_names(golden::FamilyKind::merge)) {
    const auto file = catalog.file(golden::family(fam).file());
    for (const auto& name : golden::read_file_info(file).cases) {
      Case k{golden::load_merge_case(file, name), {}};
      k.in = k.c.inputs();
      cases.push_back(std::move(k));
    }
  }
  return cases;
}

const std::vector<Case>& cases() {
  static const auto c = merge_cases();
  return c;
}

struct Worst {
  double out_use = 0, lse_use = 0, out_cos = 0;
  std::string out_case;
  void add(const std::string& name, const AttentionJudgement& j) {
    if (j.out.max_bound_use > out_use) out_use = j.out.max_bound_use, out_case = name;
    lse_use = std::max(lse_use, j.lse.max_bound_use);
    out_cos = std::max(out_cos, j.out.cos_diff);
  }
  void print(const char* who) const {
    std::printf("[merge tolerance] %s: out bound use %.3g (%s), cos %.3g; lse bound use %.3g\n", who, out_use,
                out_case.c_str(), out_cos, lse_use);
  }
};

TEST(MergeKernels, EveryRegisteredImplementationPassesEveryMergeGoldenWithHeadroom) {
  register_builtin_kernels();
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  ASSERT_FALSE(Registry::instance().merge().empty());
  for (const auto& k : Registry::instance().merge()) {
    // A device kernel without its device (cuda_merge here) is held to its stored cases by the
    // warp simulator (suites/gpu/sim/test_merge_sim.cpp) and by the device check's certificate.
    if (const auto why = k->unavailable()) {
      std::printf("[merge tolerance] %s: not run here: %s\n", k->info().name.c_str(), why->c_str());
      continue;
    }
    Worst w;
    int claimed = 0;
    for (const auto& [c, in] : cases()) {
      SCOPED_TRACE(k->info().name + " on " + c.name);
      // A state dtype a kernel does not merge is not claimed (cuda_merge: bf16 and float32 only).
      if (k->check(in.shape)) continue;
      ++claimed;
      const auto j = judge_merge(in.shape, testing::call_merge(*k, in.view()), {c.truth_out, c.truth_lse});
      EXPECT_TRUE(j.pass()) << (j.reasons.empty() ? "" : j.reasons.front());
      EXPECT_LE(j.out.max_bound_use, 0.5);
      EXPECT_LE(j.lse.max_bound_use, 0.5);
      w.add(c.name, j);
    }
    EXPECT_GT(claimed, 0) << k->info().name << " claims no stored merge case";
    w.print(k->info().name.c_str());
  }
}

// The golden deployed arithmetic (mla_ref.merge, float32, out rounded to the dtype) is the
// entries' witness: at most half of every bound on every case.
TEST(MergeKernels, TheGoldenDeployedArithmeticUsesAtMostHalfOfTheEntries) {
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  Worst w;
  for (const auto& [c, in] : cases()) {
    MergeOutputs got{in.shape.dtype, c.same_dtype_out, {c.same_dtype_lse.begin(), c.same_dtype_lse.end()}};
    const auto j = judge_merge(in.shape, got, {c.truth_out, c.truth_lse});
    EXPECT_TRUE(j.pass()) << c.name << ": " << (j.reasons.empty() ? "" : j.reasons.front());
    EXPECT_LE(j.out.max_bound_use, 0.5) << c.name;
    EXPECT_LE(j.lse.max_bound_use, 0.5) << c.name;
    w.add(c.name, j);
  }
  w.print("golden deployed arithmetic");
}

TEST(MergeKernels, MalformedStatesAreRefusedNamingThem) {
  MergeBuffers b;
  b.shape = {2, 1, 2, StateDType::f32};
  for (const double x : {1.0, 2.0, 3.0, 4.0}) append_state_value(StateDType::f32, x, b.out_a);
  b.out_b = b.out_a;
  b.lse_a = {0.5f, std::numeric_limits<float>::infinity()};
  b.lse_b = {0.25f, 0.0f};
  EXPECT_NO_THROW(validate_merge_inputs(b.view()));
  auto nan_lse = b;
  nan_lse.lse_b[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(validate_merge_inputs(nan_lse.view()), Error);
  // NaN in an empty side's out is allowed (never read); in a live side's, refused with its place.
  auto nan_out = b;
  nan_out.out_a.clear();
  for (const double x : {1.0, 2.0, std::nan(""), 4.0}) append_state_value(StateDType::f32, x, nan_out.out_a);
  EXPECT_NO_THROW(validate_merge_inputs(nan_out.view())) << "token 1 of side a is empty";
  nan_out.lse_a[1] = 1.0f;
  EXPECT_TRUE(testing::refused_naming([&] { validate_merge_inputs(nan_out.view(), "k"); }, "out_a[1, 0, 0] is NaN"));
  auto short_lse = b;
  short_lse.lse_a.pop_back();
  EXPECT_THROW(validate_merge_inputs(short_lse.view()), Error);
}

}  // namespace
}  // namespace mla
