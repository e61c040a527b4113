// L0 (CPU): the source of the CUDA cache-append kernels (check pass, then write pass) executed
// on the host by the warp simulator: kv_norm and interleaved RoPE against the fp64 oracle through
// judge_append, only the target slots written, and every kind of bad position flagged
// (with the first offending token) before anything is written. The host wrapper that turns the
// flag into mla::CapacityError runs in the GPU suite (mla_cuda_cache_append_tests).
#include "warp_sim_builtins.hpp"

#define MLA_HOST_SIM 1
#include "detail/cache_append_kernels.cuh"

#include <climits>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "append_support.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/judge/append.hpp"

namespace mla::cuda {
// gtest prints the parameter with this (found by argument-dependent lookup).
inline void PrintTo(ActivationDType d, std::ostream* os) { *os << (d == ActivationDType::bf16 ? "bf16" : "f32"); }
}  // namespace mla::cuda

namespace mla::gputest {
namespace {

namespace ap = cuda::detail::append;

struct HostRun {
  std::vector<uint16_t> cache;
  int flag[3] = {0, INT_MAX, INT_MAX};
  std::vector<std::string> errors;
};

// Both kernels over host buffers, as cache_append_launch issues them.
HostRun run(const AppendSetup& s, ActivationDType dtype) {
  HostRun r;
  r.cache = poisoned_cache(s);
  std::vector<uint16_t> lat_b, pe_b;
  std::vector<float> lat_f, pe_f;
  const void* latent = nullptr;
  const void* k_pe = nullptr;
  if (dtype == ActivationDType::bf16) {
    for (double x : s.latent) lat_b.push_back(bf16_from_double(x));
    for (double x : s.k_pe) pe_b.push_back(bf16_from_double(x));
    latent = lat_b.data();
    k_pe = pe_b.data();
  } else {
    lat_f.assign(s.latent.begin(), s.latent.end());
    pe_f.assign(s.k_pe.begin(), s.k_pe.end());
    latent = lat_f.data();
    k_pe = pe_f.data();
  }
  const std::vector<float> weight(s.weight.begin(), s.weight.end());
  cuda::CacheAppendArgs a;
  a.num_tokens = s.n();
  a.dtype = dtype;
  a.latent = latent;
  a.k_pe = k_pe;
  a.kv_norm_weight = weight.data();
  a.inv_freq = s.inv_freq.data();
  a.seq_ids = s.seq_ids.data();
  a.positions = s.positions.data();
  a.block_table = s.block_table.data();
  a.batch = s.batch;
  a.max_blocks = s.max_blocks;
  a.page_size = s.page_size;
  a.num_blocks = s.num_blocks;
  a.max_seq_len = s.max_seq_len;
  a.kv_cache = r.cache.data();
  a.eps = static_cast<float>(kEps);

  sim::Launch check;
  check.grid = static_cast<unsigned>((a.num_tokens + 127) / 128);
  check.threads = 128;
  r.errors = sim::launch(check, [&] { ap::append_check_kernel(a, r.flag); });
  if (!r.errors.empty()) return r;
  sim::Launch write;
  write.grid = static_cast<unsigned>((a.num_tokens + ap::kTokensPerBlock - 1) / ap::kTokensPerBlock);
  write.threads = 32 * ap::kTokensPerBlock;
  r.errors = sim::launch(write, [&] { ap::append_write_kernel(a, r.flag); });
  return r;
}

class CacheAppendSim : public ::testing::TestWithParam<ActivationDType> {};

TEST_P(CacheAppendSim, MatchesFp64AndTouchesOnlyItsSlots) {
  const AppendSetup s = make_setup(GetParam());
  const HostRun r = run(s, GetParam());
  ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
  EXPECT_EQ(r.flag[0], 0);
  const AppendJudgement j = judge_bf16_append(s, poisoned_cache(s), r.cache);
  EXPECT_EQ(j.verdict, tol::Verdict::pass) << fmt::format("{}", fmt::join(j.reasons, "; "));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CacheAppendSim, ::testing::Values(ActivationDType::bf16, ActivationDType::f32),
                         [](const auto& info) { return info.param == ActivationDType::bf16 ? "bf16" : "f32"; });

TEST(CacheAppendSimCapacity, EveryBadPositionIsFlaggedAndNothingIsWritten) {
  struct Bad {
    int32_t seq, pos;
    int64_t max_seq_len;
    int code;
  };
  const Bad bads[] = {
      {2, 60, 60, cuda::detail::kAppendPastMaxSeqLen},     // at max_seq_len
      {1, 16, 60, cuda::detail::kAppendPageMissing},       // sentinel page
      {2, 64, 1000, cuda::detail::kAppendPastBlockTable},  // past the table's 4 pages
      {3, 0, 60, cuda::detail::kAppendBadArgument},        // no such sequence
      {0, -1, 60, cuda::detail::kAppendBadArgument},       // negative position
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(fmt::format("sequence {} position {}", b.seq, b.pos));
    AppendSetup s = make_setup(ActivationDType::bf16);
    s.max_seq_len = b.max_seq_len;
    // The bad token goes in the middle, so "first offending token" is not trivially 0 or n-1.
    const int at = s.n() / 2;
    s.seq_ids.insert(s.seq_ids.begin() + at, b.seq);
    s.positions.insert(s.positions.begin() + at, b.pos);
    s.latent.insert(s.latent.begin() + at * 512, 512, 0.5);
    s.k_pe.insert(s.k_pe.begin() + at * 64, 64, 0.5);
    const HostRun r = run(s, ActivationDType::bf16);
    ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
    EXPECT_EQ(r.flag[0], b.code);
    EXPECT_EQ(r.flag[b.code == cuda::detail::kAppendBadArgument ? 1 : 2], at);
    EXPECT_TRUE(r.cache == poisoned_cache(s)) << "a rejected append wrote to the cache";
  }
}

}  // namespace
}  // namespace mla::gputest
