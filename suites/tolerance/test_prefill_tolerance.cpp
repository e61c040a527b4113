// L1: the prefill.* entries of the tolerance table against the prefill goldens. Each entry
// claims that a correct implementation of its class passes with room to spare; its witness
// must pass every case using at most half of every bound (and, where the entry has an
// error-ratio rule, the cosine difference at most cos_diff / k²), and a realistic defect must
// fail. Witnesses: the fp64 oracle (mla/ref/prefill.hpp) for f64; the float32 baseline
// (cpu_prefill_naive_fp32) for f32; the golden bf16 pipeline (same_dtype/*) for bf16 output,
// the class deployed prefill kernels are. The measured figures are printed, and the table's
// reasons quote them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mla/core/numeric.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/prefill.hpp"
#include "mla/ref/prefill.hpp"
#include "mla/registry/registry.hpp"
#include "support/goldens.hpp"

namespace {

using namespace mla;

const std::vector<golden::PrefillCase>& cases() {
  static const auto c = mla::testing::stored_prefill_cases();
  return c;
}

struct Worst {
  double out_use = 0, lse_use = 0, out_rel = 0, out_cos = 0, lse_abs = 0, ratio = 0;
  std::string out_case, lse_case;
  void add(const golden::PrefillCase& c, const AttentionJudgement& j) {
    if (j.out.max_bound_use > out_use) out_use = j.out.max_bound_use, out_case = c.name;
    if (j.lse.max_bound_use > lse_use) lse_use = j.lse.max_bound_use, lse_case = c.name;
    if (j.out.max_abs_truth > 0) out_rel = std::max(out_rel, j.out.max_abs_err / j.out.max_abs_truth);
    out_cos = std::max(out_cos, j.out.cos_diff);
    lse_abs = std::max(lse_abs, j.lse.max_abs_err);
    if (j.out.error_ratio) ratio = std::max(ratio, *j.out.error_ratio);
  }
  void print(const char* who) const {
    std::printf("[prefill tolerance] %s: out bound use %.3g (%s), max err %.3g of max|truth|, cos %.3g, error "
                "ratio %.3g; lse bound use %.3g (%s), max abs err %.3g\n",
                who, out_use, out_case.c_str(), out_rel, out_cos, ratio, lse_use, lse_case.c_str(), lse_abs);
  }
};

PrefillTruth truth_of(const golden::PrefillCase& c, std::vector<double>& same_out, std::vector<double>& same_lse,
                      bool with_reference) {
  PrefillTruth t{c.truth_out, c.truth_lse, {}, {}};
  if (!with_reference) return t;
  same_out.resize(c.same_dtype_out.size());
  for (std::size_t i = 0; i < same_out.size(); ++i) same_out[i] = bf16_to_float(c.same_dtype_out[i]);
  same_lse.assign(c.same_dtype_lse.begin(), c.same_dtype_lse.end());
  t.same_dtype_out = same_out;
  t.same_dtype_lse = same_lse;
  return t;
}

void expect_headroom(const golden::PrefillCase& c, const AttentionJudgement& j) {
  EXPECT_TRUE(j.pass()) << c.name << ": " << (j.reasons.empty() ? "" : j.reasons.front());
  EXPECT_LE(j.out.max_bound_use, 0.5) << c.name;
  EXPECT_LE(j.lse.max_bound_use, 0.5) << c.name;
}

TEST(PrefillTolerance, TheFp64OracleUsesAtMostHalfOfTheF64Entries) {
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  Worst w;
  for (const auto& c : cases()) {
    const auto got = ref::prefill_attention(c.inputs());
    std::vector<double> so, sl;
    const auto j = judge_prefill(c.shape, {OutDType::f64, ComputePrecision{OutDType::f64, OutDType::f64}}, got,
                                 truth_of(c, so, sl, false));
    expect_headroom(c, j);
    w.add(c, j);
  }
  w.print("fp64 oracle");
}

TEST(PrefillTolerance, TheFloat32BaselineUsesAtMostHalfOfTheF32EntriesAndAWrongScaleFails) {
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  register_builtin_kernels();
  const PrefillImpl* k = Registry::instance().find_prefill("cpu_prefill_naive_fp32");
  ASSERT_NE(k, nullptr);
  Worst w;
  int failed = 0, attended = 0;
  for (const auto& c : cases()) {
    std::vector<double> so, sl;
    const auto truth = truth_of(c, so, sl, true);
    auto p = k->prepare(c.inputs());
    p->run();
    const auto j = judge_prefill(c.shape, {k->info().out_dtype, k->info().compute}, p->results(), truth);
    expect_headroom(c, j);
    w.add(c, j);
    // Defect: the scale without YaRN's mscale² (here: 0.9 of it), as a kernel that took
    // 192^-0.5 alone would compute. Every case where some row attends two keys or more moves.
    if (ref::prefill_attention(c.inputs()).lse.empty()) continue;
    auto wrong = PrefillBuffers(c.inputs());
    wrong.softmax_scale *= 0.9;
    auto pw = k->prepare(wrong.view());
    pw->run();
    const auto jw = judge_prefill(c.shape, {k->info().out_dtype, k->info().compute}, pw->results(), truth);
    const bool two_keys = prefill_attended_pairs(c.inputs()) > c.shape.total_q;
    attended += two_keys;
    failed += two_keys && !jw.pass();
  }
  EXPECT_EQ(failed, attended) << "a 10 % wrong scale passed on some case";
  w.print("float32 baseline");
}

TEST(PrefillTolerance, TheBf16PipelineUsesAtMostHalfOfTheBf16Entries) {
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  Worst w;
  const auto& entry = tol::lookup("prefill.out.bf16");
  for (const auto& c : cases()) {
    std::vector<double> so, sl;
    truth_of(c, so, sl, true);
    PrefillOutputs got{OutDType::bf16, so, sl};
    const auto j = judge_prefill(c.shape, {OutDType::bf16, ComputePrecision{OutDType::bf16, OutDType::f32}}, got,
                                 truth_of(c, so, sl, false));
    expect_headroom(c, j);
    EXPECT_LE(j.out.cos_diff, entry.cos_diff / (entry.ratio_k * entry.ratio_k)) << c.name;
    w.add(c, j);
  }
  w.print("bf16 pipeline");
}

// The host's bf16 pipeline (ref::prefill_same_dtype) is the golden one in C++: judged as a bf16
// kernel against the golden pipeline as its reference, it stays inside the entries with the
// same headroom, and with a top-left mask it fails every case where the two masks differ.
TEST(PrefillTolerance, TheHostBf16PipelineMatchesTheGoldenOneAndAShiftedMaskFails) {
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  Worst w;
  int differ = 0, caught = 0;
  const Declaration bf16{OutDType::bf16, ComputePrecision{OutDType::bf16, OutDType::f32}};
  for (const auto& c : cases()) {
    std::vector<double> so, sl;
    const auto truth = truth_of(c, so, sl, true);
    const auto j = judge_prefill(c.shape, bf16, ref::prefill_same_dtype(c.inputs()), truth);
    expect_headroom(c, j);
    w.add(c, j);
    const auto seqs = prefill_sequences(c.inputs());
    const bool shifted = c.shape.causal && std::any_of(seqs.begin(), seqs.end(), [](const PrefillSequence& q) {
      return q.s_q != q.s_k && q.s_k > 1 && q.s_q > 0;
    });
    if (!shifted) continue;
    auto wrong = ref::prefill_attention(c.inputs(), CausalAlignment::top_left);
    for (auto& x : wrong.out) x = bf16_to_float(bf16_from_double(x));
    wrong.dtype = OutDType::bf16;
    ++differ;
    caught += !judge_prefill(c.shape, bf16, wrong, truth).pass();
  }
  EXPECT_GT(differ, 0) << "the catalog has no chunked causal case";
  EXPECT_EQ(caught, differ) << "a top-left mask passed the bf16 entries on some case";
  w.print("host bf16 pipeline vs the golden one");
}

// bf16 operands with float32 output: its witness is the bf16 pipeline without the output rounding.
TEST(PrefillTolerance, TheBf16OperandWitnessUsesAtMostHalfOfItsEntry) {
  if (cases().empty()) GTEST_SKIP() << "no golden catalog";
  Worst w;
  const Declaration cls{OutDType::f32, ComputePrecision{OutDType::bf16, OutDType::f32}};
  EXPECT_EQ(prefill_tolerance(precision_class(cls.compute, OutDType::f32), "out").name, "prefill.out.bf16_operands_f32");
  for (const auto& c : cases()) {
    std::vector<double> so, sl;
    const auto j = judge_prefill(c.shape, cls, ref::prefill_same_dtype(c.inputs(), OutDType::f32), truth_of(c, so, sl, true));
    expect_headroom(c, j);
    w.add(c, j);
  }
  w.print("bf16 operands, f32 output");
}

}  // namespace
