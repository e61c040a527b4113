// L0 (CPU): the FP8 path of the CUDA cache-append kernel, its own source run on the host by the
// warp simulator.
//  * Golden bytes: every FP8 golden case's kv_cache_bf16 tokens, appended already normalized and
//    roped, must leave the cache equal to the case's kv_cache byte for byte (both scale formats
//    are in the catalog; the edge blocks are asserted to be there).
//  * The other scale format on the same tokens, and the raw path (kv_norm + RoPE here): the bytes
//    of each token equal core's fp8_quantize_token of the bf16 token, the latter taken from the
//    same kernel writing a bf16 cache (the fp32 RMSNorm has no bit-exact outside reference).
//  * A rejected append writes nothing to an FP8 cache.
//  * Each deliberate encoder defect (Fp8Defect) changes the golden bytes: the check above can fail.
#include "warp_sim_builtins.hpp"

#define MLA_HOST_SIM 1
#include "detail/cache_append_kernels.cuh"

#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "append_support.hpp"
#include "fp8_append_support.hpp"

namespace mla::gputest {
namespace {

namespace ap = cuda::detail::append;
using cuda::AppendCacheFormat;
using cuda::AppendInput;
using cuda::Fp8ScaleFmt;

struct SimResult {
  int flag[3] = {0, INT_MAX, INT_MAX};
  std::vector<std::string> errors;
};

// Both kernels over host buffers, as cache_append_launch issues them; `cache` is updated in place.
template <ap::Fp8Defect D = ap::Fp8Defect::none>
SimResult run_sim(const cuda::CacheAppendArgs& a) {
  SimResult r;
  sim::Launch check;
  check.grid = static_cast<unsigned>((a.num_tokens + 127) / 128);
  check.threads = 128;
  r.errors = sim::launch(check, [&] { ap::append_check_kernel(a, r.flag); });
  if (!r.errors.empty()) return r;
  sim::Launch write;
  write.grid = static_cast<unsigned>((a.num_tokens + ap::kTokensPerBlock - 1) / ap::kTokensPerBlock);
  write.threads = 32 * ap::kTokensPerBlock;
  r.errors = sim::launch(write, [&] { ap::append_write_kernel<D>(a, r.flag); });
  return r;
}

// Stage-only append of a golden problem's tokens (given as bf16, or widened exactly to f32).
struct GoldenInputs {
  std::vector<float> lat_f, pe_f;
  cuda::CacheAppendArgs args(const Fp8GoldenProblem& p, cuda::ActivationDType dtype, Fp8ScaleFmt fmt,
                             std::vector<uint8_t>& cache) {
    cuda::CacheAppendArgs a;
    a.num_tokens = p.n();
    a.dtype = dtype;
    a.input = AppendInput::normed_roped;
    if (dtype == cuda::ActivationDType::bf16) {
      a.latent = p.latent.data();
      a.k_pe = p.k_pe.data();
    } else {
      lat_f.clear();
      pe_f.clear();
      for (uint16_t b : p.latent) lat_f.push_back(bf16_to_float(b));
      for (uint16_t b : p.k_pe) pe_f.push_back(bf16_to_float(b));
      a.latent = lat_f.data();
      a.k_pe = pe_f.data();
    }
    a.seq_ids = p.seq_ids.data();
    a.positions = p.positions.data();
    a.block_table = p.block_table.data();
    a.batch = p.batch;
    a.max_blocks = p.max_blocks;
    a.page_size = p.page_size;
    a.num_blocks = p.num_blocks;
    a.max_seq_len = p.max_seq_len;
    a.format = AppendCacheFormat::fp8;
    a.scale_fmt = fmt;
    a.kv_cache = cache.data();
    return a;
  }
};

class Fp8GoldenSim : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    auto p = load_fp8_golden_problems(why);
    if (p) problems_ = new std::vector<Fp8GoldenProblem>(std::move(*p));
    else why_ = new std::string(why);
  }
  static void TearDownTestSuite() {
    delete problems_;
    delete why_;
    problems_ = nullptr;
    why_ = nullptr;
  }
  void SetUp() override {
    if (!problems_) GTEST_SKIP() << *why_;
  }
  static std::vector<Fp8GoldenProblem>* problems_;
  static std::string* why_;
};
std::vector<Fp8GoldenProblem>* Fp8GoldenSim::problems_ = nullptr;
std::string* Fp8GoldenSim::why_ = nullptr;

TEST_F(Fp8GoldenSim, StageOnlyAppendWritesTheGoldenBytes) {
  Fp8Coverage total;
  bool fmts[2] = {false, false};
  for (const auto& p : *problems_) {
    for (auto dtype : {cuda::ActivationDType::bf16, cuda::ActivationDType::f32}) {
      SCOPED_TRACE(fmt::format("{} ({}, inputs {})", p.id, fmt_name(p.scale_fmt),
                               dtype == cuda::ActivationDType::bf16 ? "bf16" : "f32"));
      std::vector<uint8_t> cache = fp8_poisoned_cache(p.used.size());
      GoldenInputs in;
      const SimResult r = run_sim(in.args(p, dtype, p.scale_fmt, cache));
      ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
      ASSERT_EQ(r.flag[0], 0);
      EXPECT_EQ(first_difference(cache, p.want), "");
    }
    fmts[p.scale_fmt == Fp8ScaleFmt::ue8m0] = true;
    const Fp8Coverage c = fp8_coverage(p);
    total.saturated += c.saturated;
    total.subnormal += c.subnormal;
    total.negative_zero += c.negative_zero;
    total.floored_scales += c.floored_scales;
    total.nan_codes += c.nan_codes;
  }
  EXPECT_TRUE(fmts[0] && fmts[1]) << "the catalog must hold FP8 cases of both scale formats";
  EXPECT_GT(total.saturated, 0) << "no ±448 code in the goldens";
  EXPECT_GT(total.subnormal, 0) << "no subnormal code in the goldens";
  EXPECT_GT(total.negative_zero, 0) << "no -0 code in the goldens";
  EXPECT_GT(total.floored_scales, 0) << "no block with amax < 1e-4 in the goldens";
  EXPECT_EQ(total.nan_codes, 0) << "NaN codes in used slots";
  RecordProperty("saturated_codes", static_cast<int>(total.saturated));
  RecordProperty("subnormal_codes", static_cast<int>(total.subnormal));
  RecordProperty("floored_scales", static_cast<int>(total.floored_scales));
}

TEST_F(Fp8GoldenSim, OtherScaleFormatMatchesCoreEncoding) {
  std::vector<double> lat(512), rope(64);
  std::vector<uint8_t> tok(kFp8Tok);
  for (const auto& p : *problems_) {
    const Fp8ScaleFmt other = p.scale_fmt == Fp8ScaleFmt::fp32 ? Fp8ScaleFmt::ue8m0 : Fp8ScaleFmt::fp32;
    SCOPED_TRACE(fmt::format("{} with {}", p.id, fmt_name(other)));
    std::vector<uint8_t> cache = fp8_poisoned_cache(p.used.size());
    const std::vector<uint8_t> before = cache;
    GoldenInputs in;
    const SimResult r = run_sim(in.args(p, cuda::ActivationDType::bf16, other, cache));
    ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
    std::vector<uint8_t> want = before;
    for (int i = 0; i < p.n(); ++i) {
      for (int j = 0; j < 512; ++j) lat[static_cast<std::size_t>(j)] = bf16_to_float(p.latent[static_cast<std::size_t>(i) * 512 + static_cast<std::size_t>(j)]);
      for (int j = 0; j < 64; ++j) rope[static_cast<std::size_t>(j)] = bf16_to_float(p.k_pe[static_cast<std::size_t>(i) * 64 + static_cast<std::size_t>(j)]);
      fp8_quantize_token(lat, rope, core_fmt(other), tok);
      const int32_t seq = p.seq_ids[static_cast<std::size_t>(i)], pos = p.positions[static_cast<std::size_t>(i)];
      const int64_t slot =
          int64_t{p.block_table[static_cast<std::size_t>(seq) * p.max_blocks + pos / p.page_size]} * p.page_size +
          pos % p.page_size;
      std::memcpy(want.data() + slot * static_cast<int64_t>(kFp8Tok), tok.data(), kFp8Tok);
    }
    EXPECT_EQ(first_difference(cache, want), "");
  }
}

TEST_F(Fp8GoldenSim, EachDeliberateDefectIsCaught) {
  // Each defect must change the bytes of at least one golden case; otherwise the exact check
  // above could not tell the defect from the real encoder.
  auto differing = [&](auto run_one) {
    long n = 0;
    for (const auto& p : *problems_) {
      if (p.n() > 1024) continue;  // the small cases hold every edge; keeps L0 within seconds
      std::vector<uint8_t> cache = fp8_poisoned_cache(p.used.size());
      GoldenInputs in;
      const SimResult r = run_one(in.args(p, cuda::ActivationDType::bf16, p.scale_fmt, cache));
      EXPECT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
      for (std::size_t k = 0; k < cache.size(); ++k) n += cache[k] != p.want[k];
    }
    return n;
  };
  const long rtz = differing([](const cuda::CacheAppendArgs& a) { return run_sim<ap::Fp8Defect::round_toward_zero>(a); });
  const long nan_ovf = differing([](const cuda::CacheAppendArgs& a) { return run_sim<ap::Fp8Defect::nan_on_overflow>(a); });
  const long no_floor = differing([](const cuda::CacheAppendArgs& a) { return run_sim<ap::Fp8Defect::no_scale_floor>(a); });
  EXPECT_GT(rtz, 0) << "round-toward-zero encoding went unnoticed";
  EXPECT_GT(nan_ovf, 0) << "NaN instead of saturation at ±448 went unnoticed";
  EXPECT_GT(no_floor, 0) << "a scale without the 1e-4 amax floor went unnoticed";
  RecordProperty("bytes_changed_round_toward_zero", static_cast<int>(rtz));
  RecordProperty("bytes_changed_nan_on_overflow", static_cast<int>(nan_ovf));
  RecordProperty("bytes_changed_no_scale_floor", static_cast<int>(no_floor));
}

// ---- raw inputs (kv_norm + RoPE in the kernel) ------------------------------------------------

struct RawInputs {
  std::vector<uint16_t> lat_b, pe_b;
  std::vector<float> lat_f, pe_f, weight;
  cuda::CacheAppendArgs args(const AppendSetup& s, cuda::ActivationDType dtype, void* cache) {
    cuda::CacheAppendArgs a;
    a.num_tokens = s.n();
    a.dtype = dtype;
    if (dtype == cuda::ActivationDType::bf16) {
      for (double x : s.latent) lat_b.push_back(bf16_from_double(x));
      for (double x : s.k_pe) pe_b.push_back(bf16_from_double(x));
      a.latent = lat_b.data();
      a.k_pe = pe_b.data();
    } else {
      lat_f.assign(s.latent.begin(), s.latent.end());
      pe_f.assign(s.k_pe.begin(), s.k_pe.end());
      a.latent = lat_f.data();
      a.k_pe = pe_f.data();
    }
    weight.assign(s.weight.begin(), s.weight.end());
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
    a.kv_cache = cache;
    a.eps = static_cast<float>(kEps);
    return a;
  }
};

TEST(CacheAppendFp8Sim, RawInputsEncodeTheKernelsOwnBf16Token) {
  for (auto dtype : {cuda::ActivationDType::bf16, cuda::ActivationDType::f32}) {
    const AppendSetup s = make_setup(dtype);
    std::vector<uint16_t> bf16_cache = poisoned_cache(s);
    RawInputs in_b;
    const SimResult rb = run_sim(in_b.args(s, dtype, bf16_cache.data()));
    ASSERT_TRUE(rb.errors.empty()) << fmt::format("{}", fmt::join(rb.errors, "\n"));
    for (auto fmt : {Fp8ScaleFmt::fp32, Fp8ScaleFmt::ue8m0}) {
      SCOPED_TRACE(fmt::format("{} inputs, {} scales", dtype == cuda::ActivationDType::bf16 ? "bf16" : "f32",
                               fmt_name(fmt)));
      const std::size_t slots = static_cast<std::size_t>(s.num_blocks) * s.page_size;
      std::vector<uint8_t> cache = fp8_poisoned_cache(slots);
      std::vector<uint8_t> want = cache;
      RawInputs in;
      cuda::CacheAppendArgs a = in.args(s, dtype, cache.data());
      a.format = AppendCacheFormat::fp8;
      a.scale_fmt = fmt;
      const SimResult r = run_sim(a);
      ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
      ASSERT_EQ(r.flag[0], 0);
      std::vector<double> lat(512), rope(64);
      std::vector<uint8_t> tok(kFp8Tok);
      for (int i = 0; i < s.n(); ++i) {
        const std::size_t slot = slot_of(s, s.seq_ids[static_cast<std::size_t>(i)], s.positions[static_cast<std::size_t>(i)]);
        for (int j = 0; j < 512; ++j) lat[static_cast<std::size_t>(j)] = bf16_to_float(bf16_cache[slot * 576 + static_cast<std::size_t>(j)]);
        for (int j = 0; j < 64; ++j) rope[static_cast<std::size_t>(j)] = bf16_to_float(bf16_cache[slot * 576 + 512 + static_cast<std::size_t>(j)]);
        fp8_quantize_token(lat, rope, core_fmt(fmt), tok);
        std::memcpy(want.data() + slot * kFp8Tok, tok.data(), kFp8Tok);
      }
      EXPECT_EQ(first_difference(cache, want), "");
    }
  }
}

TEST(CacheAppendFp8Sim, RejectedAppendWritesNothing) {
  AppendSetup s = make_setup(cuda::ActivationDType::bf16);
  const int at = s.n() / 2;
  s.seq_ids.insert(s.seq_ids.begin() + at, 2);
  s.positions.insert(s.positions.begin() + at, 60);  // max_seq_len: the first invalid position
  s.latent.insert(s.latent.begin() + at * 512, 512, 0.5);
  s.k_pe.insert(s.k_pe.begin() + at * 64, 64, 0.5);
  for (auto input : {AppendInput::raw, AppendInput::normed_roped}) {
    std::vector<uint8_t> cache = fp8_poisoned_cache(static_cast<std::size_t>(s.num_blocks) * s.page_size);
    const std::vector<uint8_t> before = cache;
    RawInputs in;
    cuda::CacheAppendArgs a = in.args(s, cuda::ActivationDType::bf16, cache.data());
    a.format = AppendCacheFormat::fp8;
    a.scale_fmt = Fp8ScaleFmt::ue8m0;
    a.input = input;
    const SimResult r = run_sim(a);
    ASSERT_TRUE(r.errors.empty()) << fmt::format("{}", fmt::join(r.errors, "\n"));
    EXPECT_EQ(r.flag[0], cuda::detail::kAppendPastMaxSeqLen);
    EXPECT_EQ(r.flag[2], at);
    EXPECT_TRUE(cache == before) << "a rejected append wrote to the FP8 cache";
  }
}

}  // namespace
}  // namespace mla::gputest
