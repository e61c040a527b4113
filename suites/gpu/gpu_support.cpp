#include "gpu_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/numeric.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/same_dtype.hpp"

namespace mla::gputest {

Result same_dtype_attention(const AttnInputs& in) {
  ref::AttnResult r = ref::attention_same_dtype(in);
  return Result{std::move(r.out), std::move(r.lse)};
}

Result truth_attention(const AttnInputs& in) {
  ref::AttnResult t = ref::attention_fp64(in);
  return Result{std::move(t.out), std::move(t.lse)};
}

std::unique_ptr<Problem> make_problem(const testing::AttnSpec& spec, const testing::Layout& layout) {
  auto p = std::make_unique<Problem>();
  p->logical = testing::make_logical(spec);
  p->paged = testing::lay_out(p->logical, layout);
  p->in = p->paged.inputs();
  p->truth = truth_attention(p->in);
  p->same = same_dtype_attention(p->in);
  return p;
}

AttnOutputs run_once(const AttentionImpl& impl, const AttnInputs& in) {
  auto prepared = impl.prepare(in);
  prepared->run();
  prepared->synchronize();
  return prepared->results();
}

void PrintTo(const NamedSpec& c, std::ostream* os) {
  // No brackets, commas or semicolons: ctest's label script reads these names as a CMake list.
  *os << c.name << " lengths " << fmt::format("{}", fmt::join(c.spec.seqlens, " ")) << " s_q " << c.spec.s_q
      << " heads " << c.spec.heads << " page " << c.page_size;
}

// Each case targets a hazard; the comment says which.
std::vector<NamedSpec> synthetic_cases() {
  std::vector<NamedSpec> v;
  auto add = [&](std::string name, std::vector<int32_t> lens, int s_q, int heads, bool causal,
                 int page_size, uint64_t seed, double q_std = 1.0) {
    testing::AttnSpec s;
    s.seqlens = std::move(lens);
    s.s_q = s_q;
    s.heads = heads;
    s.causal = causal;
    s.seed = seed;
    s.q_std = q_std;
    v.push_back({std::move(name), s, page_size});
  };
  // Varlen with an empty sequence, a one-token sequence and lengths around the 32-token tile.
  add("varlen_h16", {37, 0, 130, 64, 1, 200, 33}, 1, 16, true, 16, 1);
  // All 128 heads (two 64-row tiles), page size 64 (FlashMLA's).
  add("h128", {300, 65}, 1, 128, true, 64, 2);
  // One head: 15 of the 16 tile rows are padding and must be neither read nor written (bug 5).
  add("h1_page1", {1, 33, 70}, 1, 1, true, 1, 3);
  // Speculative decode: causal rows, including rows with nothing to attend (L < s_q) (bug 6),
  // and a page size that divides nothing.
  add("sq4_causal_odd_pages", {2, 5, 100, 0, 3}, 4, 3, true, 7, 4);
  // Non-causal multi-query.
  add("sq2_noncausal_h64", {77, 129}, 2, 64, false, 32, 5);
  // 35 rows per sequence: one 64-row tile holding parts of 7 query positions.
  add("sq7_h5", {50, 3, 260}, 7, 5, true, 16, 6);
  // Many row tiles per sequence (s_q·h = 512 rows).
  add("sq256_h2", {300, 10}, 256, 2, true, 64, 7);
  // One long sequence on a small batch: automatic split-KV with a combine (bug 1, 3).
  add("long_20k", {20000, 3}, 1, 16, true, 64, 8);
  // Large logits (q std 100, scaled logits in the hundreds): max-subtracted exponentials and
  // lse combine must not overflow (bug 3).
  add("large_logits", {500, 1000, 0}, 2, 16, true, 64, 9, 100.0);
  // Odd head count between tile sizes (the 32-row instance) (bug 5: 8 heads crashed a kernel).
  add("h8_sq3", {90, 45}, 3, 8, true, 16, 10);
  return v;
}


// FP8 and sparse problems: cuda_mla_decode only (the naive baseline refuses both, which
// test_cuda_host.cpp checks). Long enough that the automatic plan splits on a real GPU.
std::vector<NamedSpec> fp8_sparse_cases() {
  std::vector<NamedSpec> v;
  auto add = [&](std::string name, std::vector<int32_t> lens, int s_q, int heads, int topk, CacheFormat f,
                 ScaleFmt sf, int page_size, uint64_t seed, double q_std = 1.0) {
    testing::AttnSpec s;
    s.seqlens = std::move(lens);
    s.s_q = s_q;
    s.heads = heads;
    s.topk = topk;
    s.causal = topk == 0;
    s.format = f;
    s.scale_fmt = sf;
    s.seed = seed;
    s.q_std = q_std;
    v.push_back({std::move(name), s, page_size});
  };
  const auto bf16 = CacheFormat::bf16, fp8 = CacheFormat::fp8;
  add("fp8_varlen_h16", {37, 0, 130, 64, 1, 2000, 33}, 1, 16, 0, fp8, ScaleFmt::fp32, 16, 101);
  add("fp8_ue8m0_h128", {300, 65}, 1, 128, 0, fp8, ScaleFmt::ue8m0, 64, 102);
  add("fp8_sq4_causal_odd_pages", {2, 5, 100, 0, 3}, 4, 3, 0, fp8, ScaleFmt::fp32, 7, 103);
  add("fp8_long_20k_large_logits", {20000, 3}, 2, 16, 0, fp8, ScaleFmt::fp32, 64, 104, 100.0);
  add("sparse_bf16_topk2048_sq2", {3000, 100, 0}, 2, 64, 2048, bf16, ScaleFmt::fp32, 64, 105);
  add("sparse_bf16_topk4096_h16", {5000}, 1, 16, 4096, bf16, ScaleFmt::fp32, 64, 106);
  add("sparse_fp8_topk2048_h128", {2500, 17}, 1, 128, 2048, fp8, ScaleFmt::ue8m0, 64, 107, 100.0);
  add("sparse_fp8_topk37_sq2_h5", {60, 0, 9}, 2, 5, 37, fp8, ScaleFmt::fp32, 7, 108);
  return v;
}

::testing::AssertionResult matches(const std::string& what, const AttnOutputs& got, const AttnShape& shape,
                                   const Result& truth, const Result* same) {
  AttentionTruth t;
  t.out = truth.out;
  t.lse = truth.lse;
  if (same) {
    t.same_dtype_out = same->out;
    t.same_dtype_lse = same->lse;
  }
  return testing::matches(what, got, shape, t);
}

::testing::AssertionResult matches(const std::string& what, const AttnOutputs& got, const AttnShape& shape,
                                   const golden::AttnCase& c) {
  return testing::matches(what, got, shape, GoldenTruth(c).view());
}

::testing::AssertionResult bitwise_equal(const std::string& what, std::span<const double> a,
                                         std::span<const double> b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure()
             << what << ": first difference at flat index " << i << ": "
             << fmt::format("{:.17g} vs {:.17g}", a[i], b[i]);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mla::gputest
