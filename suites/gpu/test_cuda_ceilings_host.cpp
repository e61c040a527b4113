// L0 (CPU): the host-side behaviour of the GPU ceiling probes and timing helpers, which must hold
// on every machine: arguments are refused before any CUDA call (so the refusal is the same with
// or without a GPU), and on a machine without a usable GPU every device object throws mla::Error
// naming itself and the reason, never crashes; the GPU snapshot never throws.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mla/core/error.hpp"
#include "mla/cuda/ceilings.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/timing.hpp"

namespace mla::cuda {
namespace {

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Runs `f`, expects mla::Error, returns its message.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("unexpected exception type: ") + e.what();
  }
  return "no exception";
}

TEST(CeilingArguments, ReadAndCopyNeedPositiveMultiplesOf16Bytes) {
  for (std::size_t bad : {std::size_t{0}, std::size_t{8}, std::size_t{17}, std::size_t{1000}}) {
    const std::string r = error_of([&] { ReadProbe p(bad); });
    EXPECT_TRUE(contains(r, "ReadProbe: bytes must be a positive multiple of 16")) << r;
    EXPECT_TRUE(contains(r, std::to_string(bad))) << r;
    const std::string c = error_of([&] { CopyProbe p(bad); });
    EXPECT_TRUE(contains(c, "CopyProbe: bytes must be a positive multiple of 16")) << c;
  }
}

TEST(CeilingArguments, GemmDimensionsArePositiveMultiplesOf8AndNamed) {
  struct Bad {
    int m, n, k;
    const char* name;
  } cases[] = {{0, 8, 8, "m"}, {-8, 8, 8, "m"}, {8, 12, 8, "n"}, {8, 8, 7, "k"}, {8, 8, -16, "k"}};
  for (const auto& b : cases) {
    const std::string m = error_of([&] { GemmProbe p(b.m, b.n, b.k); });
    EXPECT_TRUE(contains(m, std::string("GemmProbe: ") + b.name + " must be a positive multiple of 8")) << m;
  }
}

TEST(CeilingArguments, OptionsAreValidatedWithoutAGpu) {
  GpuCeilingOptions ok;
  EXPECT_NO_THROW(validate(ok));
  auto msg = [](GpuCeilingOptions o) { return error_of([&] { validate(o); }); };
  GpuCeilingOptions o = ok;
  o.stream_bytes = 16;  // the copy halves it: must stay a multiple of 16
  EXPECT_TRUE(contains(msg(o), "stream_bytes must be a positive multiple of 32")) << msg(o);
  o = ok;
  o.gemm_n = 100;
  EXPECT_TRUE(contains(msg(o), "gemm_n must be a positive multiple of 8")) << msg(o);
  o = ok;
  o.reps = 0;
  EXPECT_TRUE(contains(msg(o), "reps must be >= 1")) << msg(o);
  o = ok;
  o.warmup = -1;
  EXPECT_TRUE(contains(msg(o), "warmup must be >= 0")) << msg(o);
  // measure_gpu_ceilings validates first: a bad option is reported as such, not as "no GPU".
  o = ok;
  o.reps = 0;
  const std::string m = error_of([&] { (void)measure_gpu_ceilings(o); });
  EXPECT_TRUE(contains(m, "reps must be >= 1")) << m;
}

TEST(CeilingWithoutGpu, EveryDeviceObjectThrowsNamingItselfAndTheReason) {
  const auto why = unavailable_reason();
  if (!why) GTEST_SKIP() << "a usable GPU is present; the no-GPU behaviour is checked on machines without one";
  const std::pair<const char*, std::string> cases[] = {
      {"EventTimer", error_of([] { EventTimer t; })},
      {"L2Flusher", error_of([] { L2Flusher f; })},
      {"ReadProbe", error_of([] { ReadProbe p(1 << 20); })},
      {"CopyProbe", error_of([] { CopyProbe p(1 << 20); })},
      {"GemmProbe", error_of([] { GemmProbe p(64, 64, 64); })},
      {"measure_gpu_ceilings", error_of([] { (void)measure_gpu_ceilings({}); })},
  };
  for (const auto& [who, m] : cases) {
    EXPECT_TRUE(contains(m, std::string(who) + ": ")) << m;
    EXPECT_TRUE(contains(m, *why)) << m;
  }
  // Refusing again gives the same answer (the reason is decided once per process).
  EXPECT_EQ(error_of([] { L2Flusher f; }), cases[1].second);
}

TEST(GpuSnapshot, NeverThrowsAndSaysWhyWhenIncomplete) {
  GpuSnapshot s;
  ASSERT_NO_THROW(s = snapshot_gpu());
  const auto why = unavailable_reason();
  EXPECT_EQ(s.available, !why.has_value());
  if (why) {
    EXPECT_EQ(s.unavailable, *why);
    EXPECT_FALSE(s.nvml_status.empty());
  } else {
    EXPECT_FALSE(s.name.empty());
    EXPECT_GT(s.sm_count, 0);
    EXPECT_GT(s.l2_bytes, 0u);
    // NVML either answered or says why it did not.
    EXPECT_FALSE(s.nvml_status.empty());
  }
  EXPECT_GT(s.cuda_runtime, 0);  // the runtime linked into this binary always knows its version
  const auto j = nlohmann::json::parse(to_json(s));
  EXPECT_EQ(j.at("available").get<bool>(), s.available);
  EXPECT_EQ(j.contains("unavailable"), !s.available);
  EXPECT_EQ(j.at("nvml_status").get<std::string>(), s.nvml_status);
}

}  // namespace
}  // namespace mla::cuda
