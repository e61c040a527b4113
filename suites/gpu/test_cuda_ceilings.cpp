// L1 (GPU): the ceiling probes compute what they claim, so a bandwidth or FLOP rate computed from
// them is the rate of real work: the copy's destination equals its source, the read kernel's sum
// equals the host's sum of the same words (every vector read once, the tail included), the GEMM
// matches a CPU product of the same bf16 inputs, and the timer and the L2 flush work. Skips with
// the reason on a machine without a usable GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "mla/core/error.hpp"
#include "mla/cuda/ceilings.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/timing.hpp"

#define MLA_SKIP_WITHOUT_CUDA()                                                               \
  do {                                                                                        \
    if (const auto mla_why_ = ::mla::cuda::unavailable_reason()) GTEST_SKIP() << *mla_why_; \
  } while (0)

namespace mla::cuda {
namespace {

double bf16_to_double(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    (void)cudaStreamSynchronize(s);
    (void)cudaStreamDestroy(s);
  }
};

TEST(CeilingProbes, CopyDestinationEqualsSource) {
  MLA_SKIP_WITHOUT_CUDA();
  Stream st;
  for (std::size_t bytes : {std::size_t{16}, std::size_t{(1 << 20) + 48}, std::size_t{64} << 20}) {
    CopyProbe p(bytes);
    EXPECT_FALSE(p.verify()) << "destination starts as zeros, the source as a non-zero pattern";
    p.run(st.s);
    EXPECT_TRUE(p.verify()) << bytes << " bytes";
    EXPECT_EQ(p.bytes_moved(), 2.0 * static_cast<double>(bytes));
  }
}

TEST(CeilingProbes, ReadSumCoversEveryWordOnce) {
  MLA_SKIP_WITHOUT_CUDA();
  Stream st;
  // 16 B (one vector), a size with a tail after the 4-way unrolled loop, and one of many blocks.
  for (std::size_t bytes : {std::size_t{16}, std::size_t{(3 << 20) + 16 * 7}, std::size_t{256} << 20}) {
    ReadProbe p(bytes);
    p.run(st.s);
    const uint64_t got = p.result();
    EXPECT_EQ(got, p.expected()) << bytes << " bytes";
    p.run(st.s);
    EXPECT_EQ(p.result(), got) << "a second run must read the same words";
  }
}

TEST(CeilingProbes, GemmMatchesCpuProductOfTheSameBf16Inputs) {
  MLA_SKIP_WITHOUT_CUDA();
  Stream st;
  struct Shape {
    int m, n, k;
  } shapes[] = {{8, 8, 8}, {64, 64, 64}, {96, 40, 136}, {256, 128, 512}};
  for (const auto& sh : shapes) {
    GemmProbe p(sh.m, sh.n, sh.k);
    p.run(st.s);
    const auto a = p.a(), b = p.b(), c = p.c();
    ASSERT_EQ(a.size(), static_cast<std::size_t>(sh.m) * sh.k);
    ASSERT_EQ(b.size(), static_cast<std::size_t>(sh.k) * sh.n);
    ASSERT_EQ(c.size(), static_cast<std::size_t>(sh.m) * sh.n);
    // The inputs are not degenerate (never test on zeros). Uniform draws from [-1, 1) rounded to
    // bf16 (128 values per binade) land mostly in the top few binades, so a large A repeats its
    // values: 2403 distinct in 131072 on an H200 run. A quarter of the elements, or 1000, must be
    // distinct, and no more than 1 % may be zero.
    std::set<uint16_t> distinct(a.begin(), a.end());
    EXPECT_GT(distinct.size(), std::min<std::size_t>(a.size() / 4, 1000));
    const auto zeros = std::count_if(a.begin(), a.end(), [](uint16_t v) { return (v & 0x7fff) == 0; });
    EXPECT_LE(static_cast<std::size_t>(zeros), a.size() / 100);
    int bad = 0;
    for (int j = 0; j < sh.n; ++j)
      for (int i = 0; i < sh.m; ++i) {
        double ref = 0, mag = 0;
        for (int l = 0; l < sh.k; ++l) {
          const double x = bf16_to_double(a[static_cast<std::size_t>(l) * sh.m + i]);
          const double y = bf16_to_double(b[static_cast<std::size_t>(j) * sh.k + l]);
          ref += x * y;
          mag += std::fabs(x * y);
        }
        const double got = bf16_to_double(c[static_cast<std::size_t>(j) * sh.m + i]);
        // bf16 output rounding (half an ulp: 2^-9 relative) plus fp32 accumulation over k terms.
        const double tol = std::ldexp(std::fabs(ref), -8) + sh.k * std::ldexp(mag, -23) + 1e-30;
        if (!(std::fabs(got - ref) <= tol) && bad++ < 5)
          ADD_FAILURE() << sh.m << "x" << sh.n << "x" << sh.k << " C(" << i << "," << j << ") = " << got
                        << ", CPU " << ref << ", tolerance " << tol;
      }
    EXPECT_EQ(bad, 0) << sh.m << "x" << sh.n << "x" << sh.k;
    EXPECT_EQ(p.flops(), 2.0 * sh.m * sh.n * sh.k);
  }
}

TEST(CeilingTiming, EventTimerMeasuresWorkAndRefusesMisuse) {
  MLA_SKIP_WITHOUT_CUDA();
  Stream st;
  EventTimer t;
  EXPECT_THROW((void)t.elapsed_ms(), Error);
  EXPECT_THROW(t.stop(st.s), Error);
  GemmProbe p(1024, 1024, 1024);
  p.run(st.s);  // warm-up
  t.start(st.s);
  EXPECT_THROW((void)t.elapsed_ms(), Error) << "elapsed before stop";
  for (int i = 0; i < 4; ++i) p.run(st.s);
  t.stop(st.s);
  const float ms = t.elapsed_ms();
  EXPECT_TRUE(std::isfinite(ms));
  EXPECT_GT(ms, 0.f);
  EXPECT_LT(ms, 10000.f);
}

TEST(CeilingTiming, L2FlusherIsTwiceTheL2AndRuns) {
  MLA_SKIP_WITHOUT_CUDA();
  Stream st;
  L2Flusher f;
  EXPECT_GT(f.l2_bytes(), 0u);
  EXPECT_GE(f.bytes(), 2 * f.l2_bytes());
  EXPECT_GE(f.bytes(), std::size_t{32} << 20);
  f.flush(st.s);
  f.flush(st.s);
  MLA_CUDA_CHECK(cudaStreamSynchronize(st.s));
  L2Flusher g(std::size_t{1} << 20);
  EXPECT_EQ(g.bytes(), std::size_t{1} << 20);
  EXPECT_EQ(g.l2_bytes(), 0u);
}

TEST(CeilingMeasure, SmallRunGivesThreePositiveCeilings) {
  MLA_SKIP_WITHOUT_CUDA();
  GpuCeilingOptions o;
  o.stream_bytes = std::size_t{64} << 20;
  o.gemm_n = 1024;
  o.warmup = 1;
  o.reps = 3;
  const auto c = measure_gpu_ceilings(o);
  ASSERT_EQ(c.size(), 3u);
  const char* keys[] = {"gpu_read_bw", "gpu_copy_bw", "gpu_gemm_bf16"};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].key, keys[i]);
    EXPECT_TRUE(std::isfinite(c[i].value) && c[i].value > 0) << c[i].key;
    EXPECT_GE(c[i].value, c[i].median) << c[i].key << ": the best repetition is at least the median";
    EXPECT_EQ(c[i].reps, 3);
    EXPECT_FALSE(c[i].method.empty());
  }
  EXPECT_EQ(c[2].unit, "FLOP/s");
}

}  // namespace
}  // namespace mla::cuda
