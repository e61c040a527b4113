// L1: every registered merge-of-states implementation (mla/core/merge.hpp) over every case of the
// merge goldens, called as the host calls one (lse in its declared conventions, outputs made
// canonical) and judged by judge_merge against the fp64 truth; the merge.* entries of the
// tolerance table against their witnesses (the golden deployed arithmetic and the float32
// baseline use at most half of every bound); and the planted bugs of the field, each FAIL on
// every case it affects: base-2 lse read as natural, an infinite (empty) lse merged as a number.
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
      auto& b = k.in;
      b.shape = {k.c.tokens, static_cast<int>(k.c.heads), static_cast<int>(k.c.head_dim),
                 state_dtype_from_string(k.c.out_dtype)};
      // The stored values are exact values of the dtype: re-encoding them loses nothing.
      for (const double x : k.c.out_a) append_state_value(b.shape.dtype, x, b.out_a);
      for (const double x : k.c.out_b) append_state_value(b.shape.dtype, x, b.out_b);
      b.lse_a.assign(k.c.lse_a.begin(), k.c.lse_a.end());
      b.lse_b.assign(k.c.lse_b.begin(), k.c.lse_b.end());
      cases.push_back(std::move(k));
    }
  }
  return cases;
}

const std::vector<Case>& cases() {
  static const auto c = merge_cases();
  return c;
}

MergeOutputs call(const MergeImpl& k, const MergeInputs& canonical) {
  MergeInputs in = canonical;
  const auto a = merge_lse_to_kernel(k.info().conventions, canonical.shape, canonical.lse_a);
  const auto b = merge_lse_to_kernel(k.info().conventions, canonical.shape, canonical.lse_b);
  if (a) in.lse_a = *a;
  if (b) in.lse_b = *b;
  auto p = k.prepare(in);
  p->run();
  auto o = p->results();
  outputs_to_canonical(k.info().conventions, canonical.shape, o);
  return o;
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
    Worst w;
    for (const auto& [c, in] : cases()) {
      SCOPED_TRACE(k->info().name + " on " + c.name);
      ASSERT_FALSE(k->check(in.shape)) << *k->check(in.shape);
      const auto j = judge_merge(in.shape, call(*k, in.view()), {c.truth_out, c.truth_lse});
      EXPECT_TRUE(j.pass()) << (j.reasons.empty() ? "" : j.reasons.front());
      EXPECT_LE(j.out.max_bound_use, 0.5);
      EXPECT_LE(j.lse.max_bound_use, 0.5);
      w.add(c.name, j);
    }
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

// The two bugs, planted in a float32 merge written here: each must FAIL on every case it changes.
enum class Bug { base2_as_natural, infinite_lse_as_number };

MergeOutputs buggy(const MergeInputs& in, Bug bug) {
  const auto& s = in.shape;
  MergeOutputs o;
  o.dtype = s.dtype;
  o.out.assign(static_cast<std::size_t>(s.tokens * s.heads * s.head_dim), 0.0);
  o.lse.assign(static_cast<std::size_t>(s.tokens * s.heads), 0.0);
  std::vector<uint8_t> raw;
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      float la = in.lse_a[h * s.tokens + t], lb = in.lse_b[h * s.tokens + t];
      if (bug == Bug::base2_as_natural) {
        // The states came in base 2 (FlashInfer) and are merged with exp/log.
        la = std::isinf(la) ? la : la * static_cast<float>(1.0 / std::log(2.0));
        lb = std::isinf(lb) ? lb : lb * static_cast<float>(1.0 / std::log(2.0));
      }
      const bool skip_a = bug != Bug::infinite_lse_as_number && std::isinf(la);
      const bool skip_b = bug != Bug::infinite_lse_as_number && std::isinf(lb);
      float l = -std::numeric_limits<float>::infinity(), wa = 0, wb = 0;
      if (!skip_a || !skip_b) {
        const float m = skip_a ? lb : skip_b ? la : std::max(la, lb);
        const float xa = skip_a ? 0.0f : std::exp(la - m), xb = skip_b ? 0.0f : std::exp(lb - m);
        wa = xa / (xa + xb);
        wb = xb / (xa + xb);
        l = m + std::log(xa + xb);
      }
      if (bug == Bug::base2_as_natural && std::isfinite(l)) l *= static_cast<float>(std::log(2.0));
      o.lse[h * s.tokens + t] = l;
      for (int64_t d = 0; d < s.head_dim; ++d) {
        const std::size_t at = static_cast<std::size_t>((t * s.heads + h) * s.head_dim + d);
        float v = 0;
        if (!skip_a) v += wa * static_cast<float>(state_value(s.dtype, in.out_a, at));
        if (!skip_b) v += wb * static_cast<float>(state_value(s.dtype, in.out_b, at));
        raw.clear();
        append_state_value(s.dtype, v, raw);
        o.out[at] = state_value(s.dtype, raw, 0);
      }
    }
  }
  return o;
}

TEST(MergeKernels, EachPlantedBugFailsEveryCaseItChanges) {
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  for (const Bug bug : {Bug::base2_as_natural, Bug::infinite_lse_as_number}) {
    int affected = 0, failed = 0;
    for (const auto& [c, in] : cases()) {
      const auto v = in.view();
      // Affected: base 2 read as natural moves the weights of a row whose sides both hold a
      // finite lse, different and close enough that both weigh (|lse_a - lse_b| < 16: beyond,
      // one weight is below float32's 2^-23 either way). An infinite lse merged as a number
      // gives NaN where a side is +inf (FA2's empty row: exp(+inf - +inf)) or both are infinite;
      // one -inf side merged as a number weighs exp(-inf) = 0, the right answer, which is why
      // FA3 and FlashInfer write -inf.
      bool changes = false;
      for (std::size_t i = 0; i < in.lse_a.size(); ++i) {
        const float a = in.lse_a[i], b = in.lse_b[i];
        const float inf = std::numeric_limits<float>::infinity();
        changes |= bug == Bug::base2_as_natural
                       ? (std::isfinite(a) && std::isfinite(b) && a != b && std::abs(a - b) < 16)
                       : (a == inf || b == inf || (std::isinf(a) && std::isinf(b)));
      }
      if (!changes) continue;
      ++affected;
      failed += !judge_merge(in.shape, buggy(v, bug), {c.truth_out, c.truth_lse}).pass();
    }
    EXPECT_GT(affected, 0);
    EXPECT_EQ(failed, affected) << "bug " << static_cast<int>(bug) << " passed on some case it changes";
  }
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
  try {
    validate_merge_inputs(nan_out.view(), "k");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out_a[1, 0, 0] is NaN"), std::string::npos) << e.what();
  }
  auto short_lse = b;
  short_lse.lse_a.pop_back();
  EXPECT_THROW(validate_merge_inputs(short_lse.view()), Error);
}

}  // namespace
}  // namespace mla
