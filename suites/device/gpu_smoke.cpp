// L1 (GPU): the device check's smoke step and its sanitizer runs (suites/device/check.sh). The
// first seconds on a GPU the suite has never run on should say whether anything works at all,
// and name the first thing that does not:
//  * Decode/<rows>_<cache>_<dense|sparse>: one small problem per instance of the decode kernel
//    (16-, 32- and 64-row tiles x bf16 / FP8 cache x dense / sparse), each forced to two splits so
//    the combine kernel runs too, judged against the fp64 truth by judge_attention;
//  * Append/bf16_raw (judged by judge_append), Append/fp8_normed_roped (bytes exactly core's
//    encoding): the two cache-append kernels on a few tokens over page edges, and that they
//    write nothing but their slots;
//  * after every test a cudaDeviceSynchronize and cudaGetLastError: an error is this test's.
// One sticky CUDA error (an illegal address, a trap) makes every later CUDA call in the process
// fail; the test that caused it fails with the error, and every later test fails at once with
// "not run: ... since <that test>", so the log names the first failure, not the last.
// Without a usable GPU every test is skipped with the reason.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "append_device.hpp"
#include "append_support.hpp"
#include "gpu_support.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/attention.hpp"
#include "mla/cuda/cache_append.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/judge/append.hpp"
#include "smoke_cases.hpp"
#include "support/attn_builder.hpp"

namespace mla::gputest {
namespace {

using cuda::DeviceBuffer;

std::optional<std::string>& poisoned() {
  static std::optional<std::string> p;
  return p;
}

// Every smoke test: skip without a GPU, refuse to run on a poisoned context, and own any error
// still pending on the device when it ends.
class Smoke : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = cuda::unavailable_reason()) GTEST_SKIP() << *why;
    if (poisoned()) GTEST_FAIL() << "not run: the CUDA context is unusable since " << *poisoned();
  }
  void TearDown() override {
    if (cuda::unavailable_reason() || poisoned()) return;
    const cudaError_t e = cudaDeviceSynchronize();
    const cudaError_t last = cudaGetLastError();
    if (e == cudaSuccess && last == cudaSuccess) return;
    const cudaError_t err = e != cudaSuccess ? e : last;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string name = fmt::format("{}.{}", info->test_suite_name(), info->name());
    ADD_FAILURE() << name << " left a CUDA error: " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ")";
    if (cudaDeviceSynchronize() != cudaSuccess)  // still failing after the error was read: sticky
      poisoned() = fmt::format("{}: {}", name, cudaGetErrorName(err));
  }
};

// ---- decode: one problem per kernel instance -----------------------------------------------------

using testing::SmokeInstance;

class Decode : public Smoke, public ::testing::WithParamInterface<SmokeInstance> {};

TEST_P(Decode, OneProblemThroughDecodeAndCombine) {
  const SmokeInstance& c = GetParam();
  testing::Layout layout;
  layout.page_size = c.page_size;
  const auto p = make_problem(c.spec, layout);
  const auto k = cuda::make_mla_decode({.forced_splits = c.forced_splits});
  MLA_SKIP_IF_UNAVAILABLE(*k);
  ASSERT_EQ(k->check(p->in.shape), std::nullopt);
  const AttnOutputs o = run_once(*k, p->in);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(matches(c.name, o, p->in.shape, p->truth, &p->same));
}

INSTANTIATE_TEST_SUITE_P(Instance, Decode, ::testing::ValuesIn(testing::smoke_instances()),
                         [](const auto& info) { return info.param.name; });

// ---- cache append: both kernels, a few tokens ---------------------------------------------------

using Append = Smoke;

// RMSNorm + RoPE + bf16 rounding on the device judged by judge_append against the fp64 oracle
// ("cache.append.bf16"), and no slot but the targets touched.
TEST_F(Append, Bf16Raw) {
  const AppendSetup s = make_setup(cuda::ActivationDType::bf16);
  const DeviceInputs d(s, cuda::ActivationDType::bf16);
  const std::vector<uint16_t> before = poisoned_cache(s);
  DeviceBuffer cache = to_device(before);
  cuda::cache_append(args_for(s, d, cuda::ActivationDType::bf16, cache));
  const std::vector<uint16_t> after = download<uint16_t>(cache);
  const AppendJudgement j = judge_bf16_append(s, before, after);
  EXPECT_EQ(j.verdict, tol::Verdict::pass) << fmt::format("{}", fmt::join(j.reasons, "; "));
}

// The same tokens given as final values (bf16): the FP8 bytes must be core's fp8_quantize_token
// of them, exactly.
TEST_F(Append, Fp8NormedRoped) {
  const AppendSetup s = make_setup(cuda::ActivationDType::bf16);
  const DeviceInputs d(s, cuda::ActivationDType::bf16);
  const std::size_t slots = static_cast<std::size_t>(s.num_blocks) * s.page_size;
  const std::vector<uint8_t> before(slots * kFp8TokenBytes, 0x5A);
  DeviceBuffer cache = to_device(before);
  cuda::CacheAppendArgs a = args_for(s, d, cuda::ActivationDType::bf16, cache);
  a.input = cuda::AppendInput::normed_roped;
  a.format = cuda::AppendCacheFormat::fp8;
  a.scale_fmt = cuda::Fp8ScaleFmt::ue8m0;
  cuda::cache_append(a);
  const std::vector<uint8_t> after = download<uint8_t>(cache);
  std::vector<bool> written(slots, false);
  std::vector<uint8_t> want(kFp8TokenBytes);
  for (int i = 0; i < s.n(); ++i) {
    const std::size_t slot = slot_of(s, s.seq_ids[static_cast<std::size_t>(i)], s.positions[static_cast<std::size_t>(i)]);
    written[slot] = true;
    // make_setup rounded the values to bf16, so they are exactly what the device was given.
    fp8_quantize_token(std::span<const double>(s.latent).subspan(static_cast<std::size_t>(i) * kLatentDim, kLatentDim),
                       std::span<const double>(s.k_pe).subspan(static_cast<std::size_t>(i) * kRopeDim, kRopeDim),
                       ScaleFmt::ue8m0, want);
    ASSERT_EQ(std::memcmp(after.data() + slot * kFp8TokenBytes, want.data(), kFp8TokenBytes), 0) << "token " << i;
  }
  for (std::size_t slot = 0; slot < slots; ++slot) {
    if (!written[slot]) {
      ASSERT_EQ(std::memcmp(after.data() + slot * kFp8TokenBytes, before.data() + slot * kFp8TokenBytes, kFp8TokenBytes), 0)
          << slot;
    }
  }
}

}  // namespace
}  // namespace mla::gputest
