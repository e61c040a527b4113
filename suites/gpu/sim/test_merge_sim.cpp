// L0 (CPU): the source of the CUDA merge-of-states kernel (kernels/cuda/detail/merge_kernels.cuh)
// executed on the host by the warp simulator, on every stored merge case of a state dtype it
// merges (bf16, float32): judged by judge_merge against the case's fp64 truth, as the certifier
// judges cuda_merge on a GPU, and equal bit for bit to cpu_merge_f32, the float32 merge it mirrors
// (under the simulator the kernel's exp and log are the host's, so the two compute the very same
// floats); every output element written; empty sides never read (their NaN outs stay out of the
// result) and both sides empty give out 0 and lse -inf. The host wrapper (device buffers,
// guards, the stream) runs in the device check's certification of cuda_merge.
#include "warp_sim_builtins.hpp"

#define MLA_HOST_SIM 1
#include "detail/merge_kernels.cuh"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/core/merge.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/merge.hpp"
#include "mla/ref/prefill.hpp"
#include "mla/registry/registry.hpp"
#include "support/goldens.hpp"

namespace mla::gputest {
namespace {

namespace md = cuda::detail;

struct SimRun {
  MergeOutputs outputs;
  std::vector<std::string> errors;
};

// The kernel over host copies of `in`, launched as merge_launch launches it, its outputs
// prefilled with NaN bytes so that an element it does not write shows.
SimRun run(const MergeInputs& in) {
  const auto& s = in.shape;
  const std::size_t rows = static_cast<std::size_t>(s.tokens * s.heads);
  const std::size_t values = rows * static_cast<std::size_t>(s.head_dim);
  std::vector<uint8_t> out(values * bytes_per_value(s.dtype), 0xFF);
  std::vector<float> lse(rows);
  std::memset(lse.data(), 0xFF, lse.size() * sizeof(float));
  md::MergeArgs a;
  a.tokens = s.tokens;
  a.heads = s.heads;
  a.head_dim = s.head_dim;
  a.dtype = s.dtype == StateDType::f32 ? md::MergeDType::f32 : md::MergeDType::bf16;
  a.out_a = in.out_a.data();
  a.out_b = in.out_b.data();
  a.lse_a = in.lse_a.data();
  a.lse_b = in.lse_b.data();
  a.out = out.data();
  a.lse = lse.data();
  SimRun r;
  if (rows > 0) {
    sim::Launch cfg;
    cfg.grid = static_cast<unsigned>(rows);
    cfg.threads = md::kMergeThreads;
    r.errors = sim::launch(cfg, [&] { md::merge::merge_kernel(a); });
  }
  r.outputs.dtype = s.dtype;
  r.outputs.out.resize(values);
  for (std::size_t i = 0; i < values; ++i) r.outputs.out[i] = state_value(s.dtype, out, i);
  r.outputs.lse.assign(lse.begin(), lse.end());
  return r;
}

const MergeImpl& cpu_merge() {
  register_builtin_kernels();
  for (const auto& k : Registry::instance().merge())
    if (k->info().name == "cpu_merge_f32") return *k;
  throw mla::Error("no cpu_merge_f32 in the registry");
}

// Bit-for-bit equality of two results (NaN equal to NaN).
std::string first_difference(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  if (a.size() != b.size()) return fmt::format("{}: {} values, expected {}", what, a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) return fmt::format("{}[{}]: {} vs {}", what, i, a[i], b[i]);
  }
  return {};
}

TEST(MergeSim, EveryStoredCaseOfItsDtypesPassesTheJudgeAndEqualsTheHostFloat32Merge) {
  std::string why;
  const auto cat = testing::open_goldens(why);
  if (!cat) GTEST_SKIP() << why;
  const auto path = cat->file("merge.h5");
  int judged = 0, empty_rows = 0, nan_sides = 0;
  for (const auto& name : golden::read_file_info(path).cases) {
    const golden::MergeCase c = golden::load_merge_case(path, name);
    const MergeBuffers buf = c.inputs();
    const MergeInputs in = buf.view();
    if (in.shape.dtype == StateDType::f16) continue;  // not a dtype cuda_merge claims
    SCOPED_TRACE(name);
    const SimRun r = run(in);
    ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
    for (double x : r.outputs.lse) ASSERT_FALSE(std::isnan(x)) << "an lse element was never written (or is NaN)";
    const auto j = judge_merge(in.shape, r.outputs, {c.truth_out, c.truth_lse});
    EXPECT_TRUE(j.pass()) << fmt::format("{}", fmt::join(j.reasons, "; "));
    auto host = cpu_merge().prepare(in);
    host->run();
    const MergeOutputs h = host->results();
    EXPECT_EQ(first_difference(r.outputs.out, h.out, "out"), "");
    EXPECT_EQ(first_difference(r.outputs.lse, h.lse, "lse"), "");
    ++judged;
    for (double l : c.truth_lse) empty_rows += l == -std::numeric_limits<double>::infinity();
    for (double o : c.out_a) nan_sides += std::isnan(o);
  }
  EXPECT_GT(judged, 0) << "no stored merge case of a dtype cuda_merge claims";
  EXPECT_GT(empty_rows, 0) << "no case with both sides empty: that edge went untested";
  EXPECT_GT(nan_sides, 0) << "no empty side holding NaN: that edge went untested";
}

// The edges spelled out, on one token of two heads with head_dim 130 (more than a block's 128
// threads, so each thread's stride loop runs twice for some): side b empty as FlashAttention 2
// writes it (+inf, NaN out), side a empty as FlashAttention 3 (-inf, NaN out), both empty, and
// lse values 80 apart (a naive e^lse would overflow float32).
TEST(MergeSim, EmptySidesAreNeverReadAndBothEmptyIsZeroNotNaN) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (const StateDType dtype : {StateDType::bf16, StateDType::f32}) {
    SCOPED_TRACE(to_string(dtype));
    const int d = 130;
    const std::vector<std::pair<float, float>> lses = {{1.5f, kInf}, {-kInf, 0.25f}, {kInf, -kInf}, {90.0f, 10.0f}};
    MergeBuffers b;
    b.shape = {static_cast<int64_t>(lses.size()), 1, d, dtype};
    for (std::size_t t = 0; t < lses.size(); ++t) {
      const auto [la, lb] = lses[t];
      b.lse_a.push_back(la);
      b.lse_b.push_back(lb);
      for (int i = 0; i < d; ++i) {
        append_state_value(dtype, std::isinf(la) ? kNaN : 0.5 + i / 256.0, b.out_a);
        append_state_value(dtype, std::isinf(lb) ? kNaN : -1.0 + i / 128.0, b.out_b);
      }
    }
    const MergeInputs in = b.view();
    const SimRun r = run(in);
    ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
    const auto truth = ref::merge_states(in);
    const auto j = judge_merge(in.shape, r.outputs, {truth.out, truth.lse});
    EXPECT_TRUE(j.pass()) << fmt::format("{}", fmt::join(j.reasons, "; "));
    for (double o : r.outputs.out) ASSERT_FALSE(std::isnan(o)) << "an empty side's NaN reached the merged out";
    EXPECT_EQ(r.outputs.lse[2], -std::numeric_limits<double>::infinity()) << "both sides empty: lse -inf";
    for (int i = 0; i < d; ++i) EXPECT_EQ(r.outputs.out[2 * d + i], 0.0) << "both sides empty: out 0 at " << i;
    EXPECT_EQ(r.outputs.lse[0], 1.5) << "side b empty: the lse is side a's";
  }
}

}  // namespace
}  // namespace mla::gputest
