// L1 (GPU): the FP8 cache append on the device, held to bytes.
//  * Every FP8 golden case's kv_cache_bf16 tokens, appended already normalized and roped (given
//    as bf16 and as f32), leave the whole cache equal to the case's kv_cache: written slots and
//    the untouched poison alike.
//  * The other scale format on the same tokens, and raw inputs (kv_norm + RoPE on the device):
//    each token's bytes equal core's fp8_quantize_token of the bf16 token, the latter taken from
//    the same device writing a bf16 cache (the fp32 RMSNorm has no bit-exact outside reference).
//  * A position past capacity raises mla::CapacityError and leaves the FP8 cache untouched.
// The simulator test (sim/test_cache_append_fp8_sim.cpp) runs the same checks on the kernel's
// source without a GPU, and shows each deliberate encoder defect is caught by them.
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "append_device.hpp"
#include "append_support.hpp"
#include "fp8_append_support.hpp"
#include "gpu_support.hpp"
#include "mla/core/error.hpp"
#include "mla/cuda/device_buffer.hpp"

namespace mla::gputest {
namespace {

using cuda::AppendCacheFormat;
using cuda::AppendInput;
using cuda::DeviceBuffer;
using cuda::Fp8ScaleFmt;

int64_t slot_index(const std::vector<int32_t>& bt, int max_blocks, int page_size, int32_t seq, int32_t pos) {
  return int64_t{bt[static_cast<std::size_t>(seq) * max_blocks + pos / page_size]} * page_size + pos % page_size;
}

// Appends a golden problem's tokens (stage-only) on the device; returns the cache bytes.
std::vector<uint8_t> append_golden(const Fp8GoldenProblem& p, cuda::ActivationDType dtype, Fp8ScaleFmt fmt) {
  DeviceBuffer lat, pe;
  if (dtype == cuda::ActivationDType::bf16) {
    lat = to_device(p.latent);
    pe = to_device(p.k_pe);
  } else {
    std::vector<float> lf, pf;
    for (uint16_t b : p.latent) lf.push_back(bf16_to_float(b));
    for (uint16_t b : p.k_pe) pf.push_back(bf16_to_float(b));
    lat = to_device(lf);
    pe = to_device(pf);
  }
  const DeviceBuffer seq = to_device(p.seq_ids), pos = to_device(p.positions), bt = to_device(p.block_table);
  DeviceBuffer cache = to_device(fp8_poisoned_cache(p.used.size()));
  cuda::CacheAppendArgs a;
  a.num_tokens = p.n();
  a.dtype = dtype;
  a.input = AppendInput::normed_roped;
  a.latent = lat.data();
  a.k_pe = pe.data();
  a.seq_ids = seq.as<const int32_t>();
  a.positions = pos.as<const int32_t>();
  a.block_table = bt.as<const int32_t>();
  a.batch = p.batch;
  a.max_blocks = p.max_blocks;
  a.page_size = p.page_size;
  a.num_blocks = p.num_blocks;
  a.max_seq_len = p.max_seq_len;
  a.format = AppendCacheFormat::fp8;
  a.scale_fmt = fmt;
  a.kv_cache = cache.data();
  cuda::cache_append(a);
  return download<uint8_t>(cache);
}

class CudaFp8Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    MLA_SKIP_WITHOUT_CUDA();
    std::string why;
    auto p = load_fp8_golden_problems(why);
    if (!p) GTEST_SKIP() << why;
    problems_ = std::move(*p);
  }
  std::vector<Fp8GoldenProblem> problems_;
};

TEST_F(CudaFp8Golden, StageOnlyAppendWritesTheGoldenBytes) {
  for (const auto& p : problems_) {
    for (auto dtype : {cuda::ActivationDType::bf16, cuda::ActivationDType::f32}) {
      SCOPED_TRACE(fmt::format("{} ({}, inputs {})", p.id, fmt_name(p.scale_fmt),
                               dtype == cuda::ActivationDType::bf16 ? "bf16" : "f32"));
      EXPECT_EQ(first_difference(append_golden(p, dtype, p.scale_fmt), p.want), "");
    }
  }
}

TEST_F(CudaFp8Golden, OtherScaleFormatMatchesCoreEncoding) {
  std::vector<double> lat(512), rope(64);
  std::vector<uint8_t> tok(kFp8Tok);
  for (const auto& p : problems_) {
    const Fp8ScaleFmt other = p.scale_fmt == Fp8ScaleFmt::fp32 ? Fp8ScaleFmt::ue8m0 : Fp8ScaleFmt::fp32;
    SCOPED_TRACE(fmt::format("{} with {}", p.id, fmt_name(other)));
    std::vector<uint8_t> want = fp8_poisoned_cache(p.used.size());
    for (int i = 0; i < p.n(); ++i) {
      const std::size_t base = static_cast<std::size_t>(i);
      for (std::size_t j = 0; j < 512; ++j) lat[j] = bf16_to_float(p.latent[base * 512 + j]);
      for (std::size_t j = 0; j < 64; ++j) rope[j] = bf16_to_float(p.k_pe[base * 64 + j]);
      fp8_quantize_token(lat, rope, core_fmt(other), tok);
      const int64_t slot = slot_index(p.block_table, p.max_blocks, p.page_size, p.seq_ids[base], p.positions[base]);
      std::memcpy(want.data() + slot * static_cast<int64_t>(kFp8Tok), tok.data(), kFp8Tok);
    }
    EXPECT_EQ(first_difference(append_golden(p, cuda::ActivationDType::bf16, other), want), "");
  }
}

TEST(CudaCacheAppendFp8, RawInputsEncodeTheDevicesOwnBf16Token) {
  MLA_SKIP_WITHOUT_CUDA();
  for (auto dtype : {cuda::ActivationDType::bf16, cuda::ActivationDType::f32}) {
    const AppendSetup s = make_setup(dtype);
    const DeviceInputs d(s, dtype);
    DeviceBuffer bf16_dev = to_device(poisoned_cache(s));
    cuda::cache_append(args_for(s, d, dtype, bf16_dev));
    const std::vector<uint16_t> bf16_cache = download<uint16_t>(bf16_dev);
    for (auto fmt : {Fp8ScaleFmt::fp32, Fp8ScaleFmt::ue8m0}) {
      SCOPED_TRACE(fmt::format("{} inputs, {} scales", dtype == cuda::ActivationDType::bf16 ? "bf16" : "f32",
                               fmt_name(fmt)));
      std::vector<uint8_t> want = fp8_poisoned_cache(static_cast<std::size_t>(s.num_blocks) * s.page_size);
      DeviceBuffer cache = to_device(want);
      cuda::CacheAppendArgs a = args_for(s, d, dtype, cache);
      a.format = AppendCacheFormat::fp8;
      a.scale_fmt = fmt;
      cuda::cache_append(a);
      std::vector<double> lat(512), rope(64);
      std::vector<uint8_t> tok(kFp8Tok);
      for (int i = 0; i < s.n(); ++i) {
        const std::size_t slot = slot_of(s, s.seq_ids[static_cast<std::size_t>(i)], s.positions[static_cast<std::size_t>(i)]);
        for (std::size_t j = 0; j < 512; ++j) lat[j] = bf16_to_float(bf16_cache[slot * 576 + j]);
        for (std::size_t j = 0; j < 64; ++j) rope[j] = bf16_to_float(bf16_cache[slot * 576 + 512 + j]);
        fp8_quantize_token(lat, rope, core_fmt(fmt), tok);
        std::memcpy(want.data() + slot * kFp8Tok, tok.data(), kFp8Tok);
      }
      EXPECT_EQ(first_difference(download<uint8_t>(cache), want), "");
    }
  }
}

TEST(CudaCacheAppendFp8, PastCapacityIsAnErrorAndWritesNothing) {
  MLA_SKIP_WITHOUT_CUDA();
  AppendSetup s = make_setup(cuda::ActivationDType::bf16);
  s.seq_ids.push_back(2);
  s.positions.push_back(60);  // max_seq_len 60
  s.latent.resize(s.latent.size() + 512, 0.5);
  s.k_pe.resize(s.k_pe.size() + 64, 0.5);
  const DeviceInputs d(s, cuda::ActivationDType::bf16);
  for (auto input : {AppendInput::raw, AppendInput::normed_roped}) {
    const std::vector<uint8_t> before = fp8_poisoned_cache(static_cast<std::size_t>(s.num_blocks) * s.page_size);
    DeviceBuffer cache = to_device(before);
    cuda::CacheAppendArgs a = args_for(s, d, cuda::ActivationDType::bf16, cache);
    a.format = AppendCacheFormat::fp8;
    a.scale_fmt = Fp8ScaleFmt::ue8m0;
    a.input = input;
    try {
      cuda::cache_append(a);
      ADD_FAILURE() << "position 60 (max_seq_len 60) was accepted";
    } catch (const CapacityError& e) {
      EXPECT_NE(std::string(e.what()).find("max_seq_len 60"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(download<uint8_t>(cache) == before) << "a rejected append wrote to the FP8 cache";
  }
}

}  // namespace
}  // namespace mla::gputest
