// L0 (CPU): the arguments of the naive baseline's two cuBLAS calls (detail/naive_gemm_plan.hpp),
// executed by a reference column-major strided-batched GEMM in double on the documented
// buffer layouts: the whole naive pipeline (gather, Q·Kᵀ, softmax, P·V) must then reproduce
// the fp64 truth, and no call may touch an element outside its buffer. A wrong leading
// dimension, stride, transpose flag or offset fails here instead of on the GPU. The same plan
// gives the bytes the timed call moves, which the baseline's byte model must equal.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "detail/naive_gemm_plan.hpp"
#include "gemm_ref.hpp"
#include "gpu_support.hpp"
#include "mla/core/numeric.hpp"
#include "mla/cuda/attention.hpp"
#include "mla/ref/attention.hpp"
#include "support/attn_builder.hpp"

namespace mla::cuda::detail {
namespace {

TEST(NaiveGemmPlan, ReproducesTheTruthThroughTheDocumentedLayouts) {
  for (const bool causal : {true, false}) {
    testing::AttnSpec spec;
    spec.seqlens = {37, 0, 5, 64};
    spec.s_q = 3;
    spec.heads = 5;
    spec.causal = causal;
    spec.seed = 12;
    const testing::Logical lg = testing::make_logical(spec);
    const testing::Paged pg = testing::lay_out(lg, testing::Layout{});
    const AttnInputs in = pg.inputs();
    const ref::PagedCache cache(in);
    const int B = in.shape.batch, SQ = in.shape.s_q, H = in.shape.heads;
    std::vector<double> q(in.q.size());
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = bf16_to_float(in.q[i]);
    std::vector<double> out(static_cast<std::size_t>(B) * SQ * H * 512, std::numeric_limits<double>::quiet_NaN());
    std::vector<double> lse(static_cast<std::size_t>(B) * H * SQ, std::numeric_limits<double>::quiet_NaN());
    for (int b = 0; b < B; ++b) {
      const int L = static_cast<int>(cache.seqlen(b));
      if (L == 0) {  // what naive_empty writes
        std::fill(out.begin() + int64_t{b} * SQ * H * 512, out.begin() + int64_t{b + 1} * SQ * H * 512, 0.0);
        std::fill(lse.begin() + int64_t{b} * H * SQ, lse.begin() + int64_t{b + 1} * H * SQ,
                  std::numeric_limits<double>::infinity());
        continue;
      }
      // The gather: K [h, L, 576], V [h, L, 512].
      std::vector<double> K(static_cast<std::size_t>(H) * L * 576), V(static_cast<std::size_t>(H) * L * 512), tok(576);
      for (int t = 0; t < L; ++t) {
        cache.token(b, t, tok.data());
        for (int hh = 0; hh < H; ++hh) {
          std::copy(tok.begin(), tok.end(), K.begin() + (int64_t{hh} * L + t) * 576);
          std::copy(tok.begin(), tok.begin() + 512, V.begin() + (int64_t{hh} * L + t) * 512);
        }
      }
      std::vector<double> S(static_cast<std::size_t>(H) * SQ * L), P(S.size());
      gemm_ref(naive_score_gemm(b, SQ, H, L), K, q, S);
      // The softmax kernel's row semantics: row hh·s_q + s, causal limit, lse [h, s_q].
      for (int row = 0; row < H * SQ; ++row) {
        const int s = row % SQ;
        const int limit = causal ? std::min(L, std::max(0, L - SQ + s + 1)) : L;
        double* p = P.data() + int64_t{row} * L;
        const double* x = S.data() + int64_t{row} * L;
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        for (int t = 0; t < limit; ++t) m = std::max(m, x[t] * in.softmax_scale);
        for (int t = 0; t < limit; ++t) sum += std::exp(x[t] * in.softmax_scale - m);
        for (int t = 0; t < L; ++t) p[t] = t < limit ? std::exp(x[t] * in.softmax_scale - m) / sum : 0.0;
        lse[static_cast<std::size_t>(int64_t{b} * H * SQ + row)] =
            limit == 0 ? std::numeric_limits<double>::infinity() : m + std::log(sum);
      }
      gemm_ref(naive_value_gemm(b, SQ, H, L), V, P, out);
    }
    const gputest::Result truth = gputest::truth_attention(in);
    AttnOutputs o;
    o.dtype = OutDType::f64;
    o.out = out;
    o.lse = lse;
    EXPECT_TRUE(gputest::matches(fmt::format("naive plan, causal={}", causal), o, in.shape, truth));
  }
}

// The baseline's byte model counts what its timed call moves, derived here from the calls it
// issues per sequence: each GEMM's A and B read and C written (K and q, then V and P, read; S
// and out written), the softmax reading S at the attended positions and writing P and lse, and
// an empty sequence's out and lse fills. Nothing is gathered: the per-head K/V are prepare()'s.
TEST(NaiveGemmPlan, ByteModelIsWhatTheTimedCallMoves) {
  const auto naive = make_naive_mha_cublas();
  for (const bool causal : {true, false}) {
    testing::AttnSpec spec;
    spec.seqlens = {37, 0, 5, 64};
    spec.s_q = 3;
    spec.heads = 5;
    spec.causal = causal;
    const testing::Paged pg = testing::lay_out(testing::make_logical(spec), testing::Layout{});
    const AttnInputs in = pg.inputs();
    const int SQ = in.shape.s_q, H = in.shape.heads;
    double bytes = 0;
    for (int b = 0; b < in.shape.batch; ++b) {
      const int L = in.cache_seqlens[static_cast<std::size_t>(b)];
      if (L == 0) {
        bytes += double(SQ) * H * (512 * 2 + 4);
        continue;
      }
      const StridedGemm score = naive_score_gemm(b, SQ, H, L), value = naive_value_gemm(b, SQ, H, L);
      bytes += double(score.batch) * (double(score.m) * score.k * 2 + double(score.k) * score.n * 2 +
                                      double(score.m) * score.n * 4);
      for (int s = 0; s < SQ; ++s) {
        const int limit = causal ? std::min(L, std::max(0, L - SQ + s + 1)) : L;
        bytes += double(H) * (double(limit) * 4 + double(L) * 2 + 4);  // S read, P and lse written
      }
      bytes += double(value.batch) * (double(value.m) * value.k * 2 + double(value.k) * value.n * 2 +
                                      double(value.m) * value.n * 2);
    }
    EXPECT_EQ(naive->cost(in).bytes, bytes) << "causal=" << causal;
  }
}

}  // namespace
}  // namespace mla::cuda::detail
