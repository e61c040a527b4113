// L1 (GPU): the paged-cache append judged by judge_append against the fp64 oracle of kv_norm and
// interleaved RoPE; every slot not written must keep its NaN poison bit for bit;
// positions past capacity must raise mla::CapacityError and leave the cache untouched.
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "append_device.hpp"
#include "append_support.hpp"
#include "gpu_support.hpp"
#include "mla/core/config.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/cuda/cache_append.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/judge/append.hpp"
#include "mla/ref/rope.hpp"

namespace mla::cuda {
// gtest prints the parameter with this (found by argument-dependent lookup).
inline void PrintTo(ActivationDType d, std::ostream* os) { *os << (d == ActivationDType::bf16 ? "bf16" : "f32"); }
}  // namespace mla::cuda

namespace mla::gputest {
namespace {

using cuda::ActivationDType;
using cuda::DeviceBuffer;

class CudaCacheAppend : public ::testing::TestWithParam<ActivationDType> {};

TEST_P(CudaCacheAppend, MatchesFp64AndTouchesOnlyItsSlots) {
  MLA_SKIP_WITHOUT_CUDA();
  const ActivationDType dtype = GetParam();
  const AppendSetup s = make_setup(dtype);
  const DeviceInputs d(s, dtype);
  const std::vector<uint16_t> before = poisoned_cache(s);
  DeviceBuffer cache = to_device(before);
  cuda::cache_append(args_for(s, d, dtype, cache));
  const std::vector<uint16_t> after = download<uint16_t>(cache);

  const AppendJudgement j = judge_bf16_append(s, before, after);
  EXPECT_EQ(j.verdict, tol::Verdict::pass) << fmt::format("{}", fmt::join(j.reasons, "; "));
  // A half-split RoPE would be wrong by O(1) (docs/field.md, "Upstream semantics"); with the token
  // at position 59 the rotation is far from the identity, so the check above would have caught it.
  // Make sure the setup really rotates: the rope part differs from the unrotated input somewhere.
  bool rotated = false;
  for (int i = 0; i < s.n() && !rotated; ++i) {
    const auto e = expected_token(s, i);
    for (int j = 0; j < 64; ++j)
      rotated |= std::fabs(e[512 + static_cast<std::size_t>(j)] - s.k_pe[static_cast<std::size_t>(i * 64 + j)]) > 0.1;
  }
  EXPECT_TRUE(rotated);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaCacheAppend,
                         ::testing::Values(ActivationDType::bf16, ActivationDType::f32),
                         [](const auto& info) { return info.param == ActivationDType::bf16 ? "bf16" : "f32"; });

// Appends one token (on top of the setup's valid ones) and expects a CapacityError naming it,
// with the cache unchanged: the check runs before any write.
void expect_capacity_error(AppendSetup s, int32_t seq, int32_t pos, const std::string& needle) {
  s.seq_ids.push_back(seq);
  s.positions.push_back(pos);
  s.latent.resize(s.latent.size() + 512, 0.5);
  s.k_pe.resize(s.k_pe.size() + 64, 0.5);
  const DeviceInputs d(s, ActivationDType::bf16);
  const std::vector<uint16_t> before = poisoned_cache(s);
  DeviceBuffer cache = to_device(before);
  try {
    cuda::cache_append(args_for(s, d, ActivationDType::bf16, cache));
    ADD_FAILURE() << "position " << pos << " of sequence " << seq << " was accepted";
  } catch (const CapacityError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cache capacity exceeded"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("position {}", pos)), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
  EXPECT_TRUE(download<uint16_t>(cache) == before) << "a rejected append wrote to the cache";
}

TEST(CudaCacheAppendCapacity, PastCapacityIsAnErrorAndWritesNothing) {
  MLA_SKIP_WITHOUT_CUDA();
  const AppendSetup s = make_setup(ActivationDType::bf16);
  // max_seq_len 60: position 60 is the first past it (upstream would silently drop a 1-token
  // write there), although the block table of sequence 2 still has room.
  expect_capacity_error(s, 2, 60, "max_seq_len 60");
  // Sequence 1 has one page: position 16 needs an entry that holds the sentinel.
  expect_capacity_error(s, 1, 16, "block_table[1][1] = 2147483647");
  // With a larger max_seq_len the block table itself runs out at 4 pages (64 tokens).
  AppendSetup big = s;
  big.max_seq_len = 1000;
  expect_capacity_error(big, 2, 64, "past the block table");
}

TEST(CudaCacheAppendCapacity, MalformedTokensAreErrorsNotCapacity) {
  MLA_SKIP_WITHOUT_CUDA();
  for (const auto& [seq, pos] : {std::pair{3, 0}, std::pair{-1, 0}, std::pair{0, -5}}) {
    AppendSetup s = make_setup(ActivationDType::bf16);
    s.seq_ids.push_back(seq);
    s.positions.push_back(pos);
    s.latent.resize(s.latent.size() + 512, 0.5);
    s.k_pe.resize(s.k_pe.size() + 64, 0.5);
    const DeviceInputs d(s, ActivationDType::bf16);
    const std::vector<uint16_t> before = poisoned_cache(s);
    DeviceBuffer cache = to_device(before);
    try {
      cuda::cache_append(args_for(s, d, ActivationDType::bf16, cache));
      ADD_FAILURE() << "sequence " << seq << " position " << pos << " accepted";
    } catch (const CapacityError& e) {
      ADD_FAILURE() << "reported as capacity: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("sequence id {}", seq)), std::string::npos) << e.what();
    }
    EXPECT_TRUE(download<uint16_t>(cache) == before) << "a rejected append wrote to the cache";
  }
}

}  // namespace
}  // namespace mla::gputest
