// L0 (CPU): the GPU suite's deployed-precision reference (same_dtype_attention: fp32 scores and
// softmax, P and output rounded to bf16) arms the error-ratio rule for the CUDA kernels, so it
// is checked here against the fp64 truth on every synthetic case the GPU tests use: it must sit
// inside the bf16 bounds (a broken reference would let a broken kernel through the ratio rule,
// or fail a correct one), and it must not be exact (then it would not be a bf16 computation).
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>

#include "gpu_support.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"

namespace mla::gputest {
namespace {

class SameDtypeReference : public ::testing::TestWithParam<NamedSpec> {};

TEST_P(SameDtypeReference, IsWithinTheBf16BoundsOfTheTruth) {
  const NamedSpec& c = GetParam();
  testing::Layout layout;
  layout.page_size = c.page_size;
  const testing::Logical lg = testing::make_logical(c.spec);
  const testing::Paged pg = testing::lay_out(lg, layout);
  const AttnInputs in = pg.inputs();
  const Result truth = truth_attention(in);
  const Result same = same_dtype_attention(in);
  AttnOutputs o;
  o.dtype = OutDType::bf16;
  o.out = same.out;
  o.lse = same.lse;
  EXPECT_TRUE(matches(c.name + " same-dtype reference", o, in.shape, truth));
  // The ratio rule lets a kernel be k times as far off as this reference; the element and cosine
  // bounds must leave it that room too (at most half of the element bound used), as on the
  // catalog (suites/tolerance/test_tolerance_catalog.cpp).
  for (const char* what : {"out", "lse"}) {
    const bool is_out = std::string(what) == "out";
    const auto& tol = tol::tolerance_for(OutDType::bf16, in.shape.cache_format, what);
    const auto& impl = is_out ? same.out : same.lse;
    const auto cmp = tol::judge(what, impl, is_out ? truth.out : truth.lse,
                                is_out ? out_shape(in.shape) : lse_shape(in.shape), tol, std::span<const double>(impl));
    EXPECT_LE(cmp.max_bound_use, 0.5) << what << " (" << tol.name << "), worst element at "
                                      << tol::format_index(cmp.max_abs_index) << ": abs error " << cmp.max_abs_err
                                      << " of max|truth| " << cmp.max_abs_truth;
    const double k = std::max(tol.ratio_k, 2.0);
    EXPECT_LE(cmp.cos_diff, tol.cos_diff / (k * k)) << what << " (" << tol.name << ")";
  }
  const tol::Comparison cmp = tol::judge("out", same.out, truth.out, out_shape(in.shape), tol::lookup("attn.out.f64"));
  EXPECT_GT(cmp.max_abs_err, 0.0) << "the bf16 reference equals the fp64 truth exactly";
}

INSTANTIATE_TEST_SUITE_P(Synthetic, SameDtypeReference, ::testing::ValuesIn(synthetic_cases()),
                         [](const auto& info) { return info.param.name; });

// The FP8 (dequantized values rounded to bf16) and sparse (the row's valid indices only) forms of
// the recipe, which arm the ratio rule for cuda_mla_decode's FP8 and sparse paths.
std::vector<NamedSpec> fp8_sparse_specs() {
  std::vector<NamedSpec> v;
  auto add = [&](std::string name, std::vector<int32_t> lens, int s_q, int heads, int topk, CacheFormat f,
                 ScaleFmt sf, uint64_t seed) {
    testing::AttnSpec s;
    s.seqlens = std::move(lens);
    s.s_q = s_q;
    s.heads = heads;
    s.topk = topk;
    s.causal = topk == 0;
    s.format = f;
    s.scale_fmt = sf;
    s.seed = seed;
    v.push_back({std::move(name), s, 16});
  };
  add("fp8_fp32", {37, 0, 130}, 2, 8, 0, CacheFormat::fp8, ScaleFmt::fp32, 61);
  add("fp8_ue8m0", {300, 5}, 1, 16, 0, CacheFormat::fp8, ScaleFmt::ue8m0, 62);
  add("sparse_bf16", {100, 0, 9}, 2, 16, 40, CacheFormat::bf16, ScaleFmt::fp32, 63);
  add("sparse_fp8", {200, 33}, 1, 16, 64, CacheFormat::fp8, ScaleFmt::fp32, 64);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fp8Sparse, SameDtypeReference, ::testing::ValuesIn(fp8_sparse_specs()),
                         [](const auto& info) { return info.param.name; });
// And every FP8 and sparse problem the CUDA test runs cuda_mla_decode on (long contexts, q std
// 100), so a bound the reference itself cannot meet there is found here, not on a GPU.
INSTANTIATE_TEST_SUITE_P(CudaFp8Sparse, SameDtypeReference, ::testing::ValuesIn(fp8_sparse_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace mla::gputest
