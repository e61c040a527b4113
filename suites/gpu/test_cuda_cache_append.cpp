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

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

// The device-side copies of a setup's inputs, in the requested activation dtype.
struct DeviceInputs {
  DeviceBuffer latent, k_pe, weight, inv_freq, seq_ids, positions, block_table;
  DeviceInputs(const AppendSetup& s, ActivationDType dtype) {
    auto act = [&](const std::vector<double>& v) {
      if (dtype == ActivationDType::bf16) {
        std::vector<uint16_t> b(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) b[i] = bf16_from_double(v[i]);
        return to_device(b);
      }
      return to_device(std::vector<float>(v.begin(), v.end()));
    };
    latent = act(s.latent);
    k_pe = act(s.k_pe);
    weight = to_device(std::vector<float>(s.weight.begin(), s.weight.end()));
    inv_freq = to_device(s.inv_freq);
    seq_ids = to_device(s.seq_ids);
    positions = to_device(s.positions);
    block_table = to_device(s.block_table);
  }
};

cuda::CacheAppendArgs args_for(const AppendSetup& s, const DeviceInputs& d, ActivationDType dtype, DeviceBuffer& cache) {
  cuda::CacheAppendArgs a;
  a.num_tokens = s.n();
  a.dtype = dtype;
  a.latent = d.latent.data();
  a.k_pe = d.k_pe.data();
  a.kv_norm_weight = d.weight.as<const float>();
  a.inv_freq = d.inv_freq.as<const double>();
  a.seq_ids = d.seq_ids.as<const int32_t>();
  a.positions = d.positions.as<const int32_t>();
  a.block_table = d.block_table.as<const int32_t>();
  a.batch = s.batch;
  a.max_blocks = s.max_blocks;
  a.page_size = s.page_size;
  a.num_blocks = s.num_blocks;
  a.max_seq_len = s.max_seq_len;
  a.kv_cache = cache.as<uint16_t>();
  a.eps = static_cast<float>(kEps);
  return a;
}

std::vector<uint16_t> download(const DeviceBuffer& b) {
  std::vector<uint16_t> v(b.size() / sizeof(uint16_t));
  b.download(v.data(), b.size());
  return v;
}

class CudaCacheAppend : public ::testing::TestWithParam<ActivationDType> {};

TEST_P(CudaCacheAppend, MatchesFp64AndTouchesOnlyItsSlots) {
  MLA_SKIP_WITHOUT_CUDA();
  const ActivationDType dtype = GetParam();
  const AppendSetup s = make_setup(dtype);
  const DeviceInputs d(s, dtype);
  const std::vector<uint16_t> before = poisoned_cache(s);
  DeviceBuffer cache = to_device(before);
  cuda::cache_append(args_for(s, d, dtype, cache));
  const std::vector<uint16_t> after = download(cache);

  // Judged by the one append judge, exactly as a plug-in's append is certified: every value
  // against the fp64 oracle ("cache.append.bf16"), every slot no token maps to bit for bit.
  auto bytes = [](const std::vector<uint16_t>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(uint16_t));
  };
  const AppendJudgement j = judge_append(s.problem(), bytes(before), bytes(after), AppendCall{AppendStatus::ok, "", ""});
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
  EXPECT_TRUE(download(cache) == before) << "a rejected append wrote to the cache";
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
    EXPECT_TRUE(download(cache) == before) << "a rejected append wrote to the cache";
  }
}

}  // namespace
}  // namespace mla::gputest
