// L0 (CPU): cuda_naive_prefill_cublas's work (kernels/cuda/detail/naive_prefill_plan.hpp) executed
// on the CPU over every stored prefill case: its two cuBLAS calls per chunk by a reference
// strided-batched GEMM, its softmax kernel's row semantics (bottom-right causal limit, bf16
// probabilities, lse at [h, total_q]) and its empty-sequence fill, on the contract's buffer
// layouts. The result must pass the judge as the kernel's declared class (bf16 output, fp32
// accumulation) and no call may touch an element outside its buffer, with the chunks the real
// workspace gives and with a workspace so small that every sequence is cut into one-row chunks.
// A wrong leading dimension, stride, offset, mask or lse index fails here instead of on a GPU.
// The byte model is then checked against what the planned calls move.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "detail/naive_prefill_plan.hpp"
#include "gemm_ref.hpp"
#include "mla/core/numeric.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/registry/registry.hpp"
#include "support/goldens.hpp"
#include "support/host_call.hpp"

namespace mla::cuda::detail {
namespace {


std::vector<PrefillSeq> sequences(const PrefillInputs& in) {
  std::vector<PrefillSeq> v;
  for (const PrefillSequence& s : prefill_sequences(in)) v.push_back({s.q_begin, s.s_q, s.k_begin, s.s_k});
  return v;
}

std::vector<double> widen(std::span<const uint16_t> bits) {
  std::vector<double> v(bits.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(bits[i]);
  return v;
}

// What run() computes, step by step, with the given workspace budget.
PrefillOutputs execute_plan(const PrefillInputs& in, int64_t budget) {
  const PrefillShape& s = in.shape;
  const int H = s.heads;
  const auto seqs = sequences(in);
  const auto chunks = prefill_chunks(seqs, H, budget);
  const std::vector<double> q = widen(in.q), k = widen(in.k), v = widen(in.v);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> out(static_cast<std::size_t>(s.total_q * H * kPrefillDv), nan);
  std::vector<double> lse(static_cast<std::size_t>(H * s.total_q), nan);
  for (const PrefillSeq& sq : seqs) {
    if (sq.s_k != 0) continue;  // prefill_empty
    for (int64_t r = 0; r < sq.s_q; ++r)
      for (int hh = 0; hh < H; ++hh) {
        std::fill_n(out.begin() + ((sq.q_begin + r) * H + hh) * kPrefillDv, kPrefillDv, 0.0);
        lse[static_cast<std::size_t>(hh * s.total_q + sq.q_begin + r)] = inf;
      }
  }
  // The workspace as sized by prepare(): the largest chunk's S and P, reused by every chunk.
  const int64_t pairs = prefill_workspace_pairs(seqs, chunks);
  std::vector<double> S(static_cast<std::size_t>(H * pairs)), P(S.size());
  const float scale = static_cast<float>(in.softmax_scale);
  for (const PrefillChunk& c : chunks) {
    const PrefillSeq& sq = seqs[static_cast<std::size_t>(c.seq)];
    gemm_ref(prefill_score_gemm(sq, c, H), k, q, S);
    // The softmax kernel: block hh·rows + i, fp32 arithmetic, P rounded to bf16.
    for (int hh = 0; hh < H; ++hh)
      for (int i = 0; i < c.rows; ++i) {
        const int64_t row = int64_t{hh} * c.rows + i;
        const double* x = S.data() + row * sq.s_k;
        double* p = P.data() + row * sq.s_k;
        const int64_t limit = prefill_row_limit(s.causal, sq.s_q, sq.s_k, c.row0 + i);
        double& l = lse[static_cast<std::size_t>(hh * s.total_q + sq.q_begin + c.row0 + i)];
        if (limit == 0) {
          std::fill_n(p, sq.s_k, 0.0);
          l = inf;
          continue;
        }
        float m = -std::numeric_limits<float>::infinity(), sum = 0.f;
        for (int64_t j = 0; j < limit; ++j) m = std::max(m, static_cast<float>(x[j]) * scale);
        for (int64_t j = 0; j < limit; ++j) sum += std::exp(static_cast<float>(x[j]) * scale - m);
        for (int64_t j = 0; j < sq.s_k; ++j)
          p[j] = j < limit ? bf16_to_float(bf16_from_float(std::exp(static_cast<float>(x[j]) * scale - m) / sum)) : 0.0;
        l = m + std::log(sum);
      }
    gemm_ref(prefill_value_gemm(sq, c, H), v, P, out);
  }
  for (double& x : out) x = bf16_to_float(bf16_from_double(x));  // cuBLAS's bf16 C
  return {OutDType::bf16, out, lse};
}

TEST(NaivePrefillPlan, ReproducesEveryStoredCaseThroughTheDocumentedLayouts) {
  register_builtin_kernels();
  const PrefillImpl* kernel = Registry::instance().find_prefill("cuda_naive_prefill_cublas");
  ASSERT_NE(kernel, nullptr) << "cuda_naive_prefill_cublas is not registered";
  const auto cases = testing::stored_prefill_cases();
  if (cases.empty()) GTEST_SKIP() << "no golden catalog";
  int chunked = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const PrefillInputs in = c.inputs();
    for (const int64_t budget : {kPrefillWorkspaceBudget, int64_t{1}}) {
      const auto seqs = sequences(in);
      const auto chunks = prefill_chunks(seqs, in.shape.heads, budget);
      // Every query row of a sequence with keys is in exactly one chunk.
      std::vector<int> covered(static_cast<std::size_t>(in.shape.total_q), 0);
      for (const PrefillChunk& ch : chunks)
        for (int i = 0; i < ch.rows; ++i) ++covered[static_cast<std::size_t>(seqs[static_cast<std::size_t>(ch.seq)].q_begin + ch.row0 + i)];
      for (const PrefillSeq& sq : seqs)
        for (int64_t r = 0; r < sq.s_q; ++r)
          EXPECT_EQ(covered[static_cast<std::size_t>(sq.q_begin + r)], sq.s_k > 0 ? 1 : 0) << "row " << sq.q_begin + r;
      chunked += budget == 1 && chunks.size() > seqs.size();
      PrefillOutputs got;
      ASSERT_NO_THROW(got = execute_plan(in, budget)) << "budget " << budget;
      const auto j = testing::judge_prefill_case(kernel->info(), c, got);
      EXPECT_TRUE(j.pass()) << "budget " << budget << ": " << (j.reasons.empty() ? "" : j.reasons.front());
    }
  }
  EXPECT_GT(chunked, 0) << "no stored case was cut into chunks";
}

// The byte model (CudaNaivePrefill::cost) is what the planned calls move, counted here from the
// calls themselves: each GEMM's A and B read and C written, the softmax reading S where the row
// attends and writing P and lse, and an empty sequence's out and lse. The FLOPs stay the prefill
// model's (the causal pairs), so the naive kernel's wasted half shows as a lower rate.
TEST(NaivePrefillPlan, ByteModelIsWhatThePlannedCallsMove) {
  register_builtin_kernels();
  const PrefillImpl* kernel = Registry::instance().find_prefill("cuda_naive_prefill_cublas");
  ASSERT_NE(kernel, nullptr);
  const auto cases = testing::stored_prefill_cases();
  if (cases.empty()) GTEST_SKIP() << "no golden catalog";
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const PrefillInputs in = c.inputs();
    const int H = in.shape.heads;
    const auto seqs = sequences(in);
    double bytes = 0;
    for (const PrefillChunk& ch : prefill_chunks(seqs, H)) {
      const PrefillSeq& sq = seqs[static_cast<std::size_t>(ch.seq)];
      const StridedGemm score = prefill_score_gemm(sq, ch, H), value = prefill_value_gemm(sq, ch, H);
      bytes += double(score.batch) * (double(score.m) * score.k * 2 + double(score.k) * score.n * 2 +
                                      double(score.m) * score.n * 4);
      for (int i = 0; i < ch.rows; ++i)
        bytes += double(H) * (static_cast<double>(prefill_row_limit(in.shape.causal, sq.s_q, sq.s_k, ch.row0 + i)) * 4 +
                              static_cast<double>(sq.s_k) * 2 + 4);
      bytes += double(value.batch) * (double(value.m) * value.k * 2 + double(value.k) * value.n * 2 +
                                      double(value.m) * value.n * 2);
    }
    for (const PrefillSeq& sq : seqs)
      if (sq.s_k == 0) bytes += static_cast<double>(sq.s_q) * H * (kPrefillDv * 2 + 4);
    const CostModel cost = kernel->cost(in);
    EXPECT_DOUBLE_EQ(cost.bytes, bytes);
    EXPECT_DOUBLE_EQ(cost.flops, prefill_cost_model(in, OutDType::bf16).flops);
  }
}

TEST(NaivePrefillPlan, ChunkRowsFitTheBudgetAndNeverDropToZero) {
  EXPECT_EQ(prefill_chunk_rows(128, 4096, 4096), static_cast<int>(kPrefillWorkspaceBudget / (int64_t{128} * 4096 * 6)));
  EXPECT_EQ(prefill_chunk_rows(1, 10, 100), 10) << "never more rows than the sequence has";
  EXPECT_EQ(prefill_chunk_rows(128, 5, int64_t{1} << 20, 1), 1) << "one row even when it exceeds the budget";
  EXPECT_EQ(prefill_chunk_rows(16, 7, 0), 7) << "a sequence without keys (no chunk is made of it)";
}

}  // namespace
}  // namespace mla::cuda::detail
