// L0 (CPU): the GPU suite's deployed-precision reference (same_dtype_attention: fp32 scores and
// softmax, P and output rounded to bf16) arms the error-ratio rule for the CUDA kernels, so it
// is checked here against the fp64 truth on every synthetic case the GPU tests use: it must sit
// inside the bf16 bounds (a broken reference would let a broken kernel through the ratio rule,
// or fail a correct one), and it must not be exact (then it would not be a bf16 computation).
#include <gtest/gtest.h>

#include "gpu_support.hpp"
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
  EXPECT_TRUE(matches(c.name + " same-dtype reference", o, in.shape, truth.out, truth.lse));
  const tol::Comparison cmp = tol::judge("out", same.out, truth.out, out_shape(in.shape), tol::lookup("attn.out.f64"));
  EXPECT_GT(cmp.max_abs_err, 0.0) << "the bf16 reference equals the fp64 truth exactly";
}

INSTANTIATE_TEST_SUITE_P(Synthetic, SameDtypeReference, ::testing::ValuesIn(synthetic_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace mla::gputest
