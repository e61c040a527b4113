// THE tolerance table. Every bound the suite applies is here, by name, with the reason for it;
// no call site holds a literal tolerance.
//
// Ground rules for the numbers:
//  * Everything is judged against an fp64 truth computed on the exact input values (for an FP8
//    cache: on the exactly dequantized cache), so an implementation's error is its own error,
//    never the reference's.
//  * Deployed-precision kernels get FlashMLA's element bounds (tests/kernelkit/compare.py and
//    the decode tests) plus FlashAttention's error-ratio rule against a same-dtype reference,
//    with a floor of one bf16 rounding of the output magnitude.
//  * fp64 and fp32 implementations get bounds derived from their unit roundoff and the
//    conditioning of softmax at the largest logits in the catalog (attn_stress), with margin;
//    the measured errors behind them are in the comments.
//  * Absolute bounds scale with the tensor's largest magnitude (atol_rel_max) wherever rounding
//    errors do: P·V gives every element errors the size of the largest terms' roundings.
//  * suites/tolerance/test_tolerance_catalog.cpp re-measures every "measured" number below on
//    the current catalog and fails when a bound no longer has its stated margin.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/core/attention.hpp"

namespace mla::tol {
namespace {

// bf16 carries 8 significant bits: one rounding moves a value by at most 2^-8 of it (half an
// ulp), one ulp is 2^-8..2^-7 of it. FlashMLA's rtol 2.01/128 is therefore "two ulps at worst,
// and a hair".
constexpr double kBf16TwoUlps = 2.01 / 128.0;
constexpr double kBf16Ulp = 1.0 / 128.0;       // 2^-7: >= one ulp of any value up to it
constexpr double kBf16Rounding = 1.0 / 256.0;  // 2^-8: >= one rounding of the largest element
// fp32 lse in FlashMLA: 8 ulps of a 16-bit-mantissa budget.
constexpr double kLseRel = 8.01 / 65536.0;
// float32 logits of magnitude L round at ~2^-24·L each; 16 of those ulps of the tensor's largest
// |lse| bound a prefill lse that sits near 0 while its logits do not (add_prefill says why).
constexpr double kLseLogitRounding = 1.0 / (1 << 20);
// For measurements that are reported, never judged.
constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// Builds the table one group of entries at a time, so that each group's bounds and the reasoning
// behind them read together; build() calls the groups in the table's order.
struct TableBuilder {
  std::vector<Tolerance> t;
  void add(Tolerance x) { t.push_back(std::move(x)); }

  void add_full_precision_attention();
  void add_deployed_precision_attention();
  void add_bf16_operand_attention();
  void add_quantization_info();
  void add_layer();
  void add_cache_append();
  void add_prefill();
  void add_merge();
  void add_sparse_prefill();
  void add_topk();
  void add_indexer_append();
  void add_indexer_logits();
};

void TableBuilder::add_full_precision_attention() {
  // ---- fp64 implementations vs fp64 truth -------------------------------------------------
  // Same inputs, same math; only summation order and libm's exp/log differ from torch's.
  // Measured on the catalog: worst |error| 3.6e-14 of max|truth| (long_128k), lse within
  // 4e-15. 1e-12 of the largest magnitude leaves 25x and is still 5e4x below one fp32
  // rounding (6e-8): any fp32 step inside an "fp64" path fails.
  add({.name = "attn.out.f64",
       .why = "fp64 kernel vs fp64 truth on identical inputs: only summation order and exp() "
              "rounding differ (measured <= 3.6e-14 of max|truth|); 1e-12 of max|truth| keeps 25x "
              "margin and fails any fp32 rounding by 5e4x",
       .atol = 1e-13, .rtol = 1e-12, .cos_diff = 1e-20, .atol_rel_max = 1e-12});
  add({.name = "attn.lse.f64",
       .why = "fp64 lse vs fp64 truth: max + log(sum) rounds at ~|lse|·1e-16 (measured <= 4e-15, "
              "at most 0.0034 of this bound); rtol 1e-12, atol 1e-12 for lse near 0",
       .atol = 1e-12, .rtol = 1e-12, .cos_diff = 1e-20});

  // ---- fp32 implementations -----------------------------------------------------------------
  // Two fp32 effects: each logit rounds by ~2^-24·Σ|scale·q_i·k_i|, which exp() turns into the
  // same relative error of a weight (logits in the hundreds: attn_stress q std 100, the FP8
  // edge blocks); and a running sum over L tokens gains up to ~L·2^-24 relative to its terms.
  // Measured: 4.3e-5·max|truth| (q_std100) with blocked sums; a plain running sum over the 128K
  // tokens of long_128k measured 2.4e-4·max|truth| and cos diff 2.3e-8 (an earlier
  // cpu_naive_mha_fp32). Both are legitimate fp32 kernels: 2^-10·max|truth| and cos 1e-7 keep
  // 4x over the worse one, and a result rounded to bf16 (errors up to 2^-8 of a value, cos
  // ~1e-6) still fails.
  add({.name = "attn.out.f32",
       .why = "fp32 kernel vs fp64 truth: logit rounding amplified by exp() at logits ~100s and "
              "running sums over 128K tokens (measured up to 2.4e-4·max|truth|, cos 2.3e-8); "
              "2^-10·max|truth| and cos 1e-7 keep 4x, a bf16-rounded result fails",
       .atol = 1e-6, .rtol = 1.0 / 1024, .cos_diff = 1e-7, .atol_rel_max = 1.0 / 1024});
  add({.name = "attn.lse.f32",
       .why = "fp32 lse vs fp64 truth: FlashMLA's fp32 lse bound rel 8.01/65536 (measured <= 0.13 "
              "of it with a 128K-token running sum, 0.017 with blocked sums); atol 1e-5 for lse ~ 0",
       .atol = 1e-5, .rtol = kLseRel, .cos_diff = 1e-7});
}

void TableBuilder::add_deployed_precision_attention() {
  // ---- bf16 kernels (bf16 cache) ------------------------------------------------------------
  // FlashMLA's element bounds assume O(0.1) outputs. On this catalog (outputs up to 1.7, short
  // sequences) the deployed-precision reference itself — fp32 softmax, P rounded to bf16 —
  // misses atol 8e-4 by up to 4x on near-zero outputs: P·V puts errors of one rounding of the
  // largest terms on every element. So atol also scales: k = 2 bf16 ulps (2^-7 each) of
  // max|truth|, matching FlashMLA's two-ulp rtol; that reference uses <= 0.28 of it.
  add({.name = "attn.out.bf16",
       .why = "FlashMLA dense decode (abs 8e-4, rel 2.01/128 ~ 2 bf16 ulps), atol at least 2 bf16 "
              "ulps of max|truth| (the same-dtype reference, which misses abs 8e-4 by 4x, uses "
              "0.28 of it); FlashAttention's ratio k=2, floor 2^-8·max|truth|; cos 2e-5 >= k² x "
              "the reference's worst 2.8e-6",
       .atol = 8e-4, .rtol = kBf16TwoUlps, .cos_diff = 2e-5, .ratio_k = 2,
       .ratio_floor_rel = kBf16Rounding, .atol_rel_max = 2 * kBf16Ulp});
  add({.name = "attn.lse.bf16",
       .why = "lse is fp32 inside bf16 kernels: FlashMLA's lse bounds (abs 1e-6, rel 8.01/65536, "
              "cos 1e-7 by default); the same-dtype reference uses <= 0.11 of them",
       .atol = 1e-6, .rtol = kLseRel, .cos_diff = 1e-7});

  // ---- kernels reading the FP8 cache (bf16 output) --------------------------------------------
  // Judged against the truth on the dequantized cache, so quantization error is excluded; the
  // kernel still rounds e4m3·scale to bf16 for its MMAs, and the FP8 edge blocks hold values up
  // to 1e3, so logits (and their bf16 rounding) are large: the same-dtype reference misses
  // FlashMLA's FP8 bounds by up to 30x (out) and 144x (lse) on this catalog. With q std 100 (logits
  // in the hundreds) two near-tied keys trade weight when their bf16 rounding moves each logit by
  // units: on the GPU tests' fp8_long_20k_large_logits the reference's worst element is off by
  // 3.9 bf16 ulps of max|truth| (0.052 of 1.73), and cuda_mla_decode with three splits by 4.1 on an
  // H200 (1.05x the reference's error). The element bound is therefore 8 ulps (the reference uses
  // 0.48 of it; the catalog 0.11); the ratio rule (k = 4) is the tight check there.
  add({.name = "attn.out.fp8",
       .why = "FlashMLA sparse FP8 decode (abs 1e-3, rel 2.01/128), atol at least 8 bf16 ulps of "
              "max|truth| (the same-dtype reference uses 0.48 of it at q std 100 over 20K FP8 tokens, "
              "where near-tied logits trade weight, 0.11 on the catalog); FlashAttention's fp8 ratio "
              "k=4, floor 2^-8·max|truth|; cos 2e-4 >= k² x the reference's worst 7e-6",
       .atol = 1e-3, .rtol = kBf16TwoUlps, .cos_diff = 2e-4, .ratio_k = 4,
       .ratio_floor_rel = kBf16Rounding, .atol_rel_max = 8 * kBf16Ulp});
  add({.name = "attn.lse.fp8",
       .why = "FP8 kernels round k to bf16, moving a logit by up to 2^-8·Σ|q·k|·scale (the reference: "
              "0.031, 144x FlashMLA's lse bound). Element bound one bf16 ulp of max|lse| (reference "
              "uses 0.21 of it); the tight check is the ratio k=4 vs the same-dtype lse, floor 1e-6 "
              "+ 2^-20·max|lse|; cos 1e-5 >= k² x the reference's worst 4.8e-7",
       .atol = 1e-6, .rtol = kLseRel, .cos_diff = 1e-5, .ratio_k = 4, .ratio_floor = 1e-6,
       .ratio_floor_rel = 1.0 / (1 << 20), .atol_rel_max = kBf16Ulp});
}

void TableBuilder::add_bf16_operand_attention() {
  // ---- bf16 operands, fp32 output (precision class bf16/f32/f32) ----------------------------------
  // A kernel that reads bf16 tiles (P rounded to bf16 for P·V; an FP8 cache dequantized into
  // bf16) but keeps its fp32 sums as its output, as FlashMLA's reference does (docs/field.md,
  // "The peers' conventions", FP8 dequantization). The f32 entries cannot hold it: one bf16
  // rounding of a weight or a value (2^-9 of it) is 4x their 2^-10. Its witness is the same-dtype
  // computation with the output left in fp32 (mla/ref/same_dtype.hpp, output f32), measured on
  // every case of the catalog (suites/tolerance/test_tolerance_catalog.cpp re-measures it: L1 the
  // cases up to 16K cache tokens, L2 all). lse is fp32 as in a bf16-output kernel: attn.lse.bf16
  // and attn.lse.fp8 hold it (the witness uses <= 0.5 of them).
  //   bf16 cache: the error is P's rounding alone, an element's at most 2^-9·Σp|v|. Measured
  //   <= 0.0027·max|truth| (h128_sq2_v3_scale_ps16, h3_sq4_short; 0.0017 on long_32k), cos <= 1.6e-6,
  //   and never above the bf16-output reference's own error (ratio <= 1.00, long_32k). Without
  //   the output rounding the budget halves against attn.out.bf16: one bf16 ulp (2^-7) of
  //   max|truth| (the witness uses 0.35 of it), rtol one ulp, ratio k = 2 over the bf16-output
  //   reference with a floor of one P rounding (2^-9·max|truth|), cos 1e-5 >= k² x 1.6e-6.
  add({.name = "attn.out.bf16_operands_f32",
       .why = "bf16 operands (P rounded), fp32 sums and output: P's rounding only (measured <= 0.0027·max|truth|, "
              "cos 1.6e-6, <= 1.0x the bf16-output reference's error); atol 1 bf16 ulp of max|truth| (used "
              "0.35), rtol 1 ulp, ratio k=2 + 2^-9·max|truth|, cos 1e-5 >= k² x 1.6e-6",
       .atol = 8e-4, .rtol = kBf16Ulp, .cos_diff = 1e-5, .ratio_k = 2, .ratio_floor_rel = kBf16Rounding / 2,
       .atol_rel_max = kBf16Ulp});
  //   FP8 cache: e4m3·scale rounded to bf16 moves keys and values by 2^-9 of them, and logits of
  //   the 1e3-sized edge blocks by units; that rounding, not the output's, is most of the error.
  //   Measured <= 0.0073·max|truth| (fp8_fp32scale_h16), up to 1.25x the bf16-output reference's
  //   error (fp8_ue8m0_h64_sq2: rounding the output cancels part of it there), cos <= 6.2e-6
  //   (fp8_fp32scale_varlen_v3). Element bound 3 bf16 ulps of max|truth| (used 0.31; the
  //   bf16-output FP8 entry needs 8), rtol 2 ulps; FlashAttention's fp8 ratio k = 4, floor
  //   2^-8·max|truth|; cos 2e-4 >= k² x 6.2e-6 x 2.
  add({.name = "attn.out.fp8_bf16_operands_f32",
       .why = "FP8 dequantized into bf16 operands, fp32 sums and output: dequantization rounding dominates "
              "(measured <= 0.0073·max|truth|, 1.25x the bf16-output reference, cos 6.2e-6); atol 3 bf16 ulps of "
              "max|truth| (used 0.31), rtol 2 ulps, ratio k=4 + 2^-8·max|truth|, cos 2e-4",
       .atol = 1e-3, .rtol = kBf16TwoUlps, .cos_diff = 2e-4, .ratio_k = 4, .ratio_floor_rel = kBf16Rounding,
       .atol_rel_max = 3 * kBf16Ulp});
}

void TableBuilder::add_quantization_info() {
  // ---- FP8 quantization, information only --------------------------------------------------
  // Never gates a verdict: it records how far an FP8 kernel is from the fp64 result on the
  // unquantized cache, so quantization error and kernel error are reported apart (docs/field.md,
  // "Bugs", 7). No bound is honest here: on the catalog's edge blocks (values up to 1e3) e4m3
  // rounding of k legitimately moves logits by several units, and outputs with them (measured:
  // lse by up to 3.8, out by up to 185 of max|truth| 1e3).
  add({.name = "attn.fp8_quantization.info",
       .why = "information only, unbounded: distance to the result on the unquantized cache "
              "(e4m3 rounding of 1e3-sized edge values moves logits by units); never part of a "
              "verdict",
       .atol = kUnbounded, .rtol = kUnbounded, .cos_diff = kUnbounded});
}

void TableBuilder::add_layer() {
  // ---- full layer, fp64 C++ vs fp64 golden --------------------------------------------------
  add({.name = "layer.out.f64",
       .why = "fp64 layer vs fp64 golden: GEMMs of up to 7168 terms in another order (~1e-14 "
              "relative each) through RMSNorm, RoPE, softmax and wo; 1e-12 of max|truth| for "
              "outputs near 0",
       .atol = 1e-13, .rtol = 1e-9, .cos_diff = 1e-20, .atol_rel_max = 1e-12});
  add({.name = "layer.intermediate.f64",
       .why = "fp64 intermediates (projections, roped q/k, scores, probs, latents): same roundoff "
              "budget as the layer output; -inf masked scores match by the mask rule",
       .atol = 1e-13, .rtol = 1e-9, .cos_diff = 1e-20, .atol_rel_max = 1e-12});
  add({.name = "naive_vs_absorbed.f64",
       .why = "the two MLA forms are the same product in another association "
              "((q·W_UK)·c vs q·(W_UK·c)); in fp64 they agree to roundoff of those GEMMs, "
              "the Python reference's 1e-12 of max|truth|",
       .atol = 1e-13, .rtol = 1e-9, .cos_diff = 1e-20, .atol_rel_max = 1e-12});
}

void TableBuilder::add_cache_append() {
  // ---- paged-cache append (kv_norm + RoPE written as bf16) vs fp64 ------------------------------
  // Each cached value is one bf16 rounding (unit roundoff 2^-8) of an fp32 RMSNorm or rotation,
  // whose own error is ~1e-6 relative: rtol 1.01·2^-8. A rotated pair can cancel to ~0, where
  // fp32's error is relative to the inputs instead: a few 2^-24·max|x|, hence 2^-18·max|truth|
  // (16x margin). cos_diff: the rms of uniform bf16 rounding errors gives ~7e-7.
  add({.name = "cache.append.bf16",
       .why = "GPU cache append vs fp64 RMSNorm/RoPE: one bf16 rounding (2^-8) of an fp32 value "
              "(~1e-6 rel); cancelling RoPE pairs bounded by 2^-18·max|truth|",
       .atol = 1e-6, .rtol = 1.01 / 256.0, .cos_diff = 5e-6, .atol_rel_max = 1.0 / 262144.0});
  // An FP8 cache append, dequantized, vs the fp64 values: the value before quantization carries
  // the bf16 budget above, then e4m3 rounding (3 mantissa bits: half an ulp is <= 2^-4 of a
  // normal value) with the token's own block scale. Subnormal codes round to half of 2^-9·scale,
  // and scale <= 2·amax/448 (ue8m0 rounds it up), amax <= max|truth|: 2^-9/448·max|truth|, plus
  // the bf16 entry's 2^-18. cos_diff: uniform rounding of <= 2^-4 relative gives ~3e-4.
  // The append judge also checks every code and scale for consistency (judge/src/append.cpp),
  // which this element bound alone would not pin down.
  add({.name = "cache.append.fp8.dequant",
       .why = "FP8 cache append, dequantized, vs fp64: e4m3 half-ulp (2^-4 rel) after one bf16 rounding "
              "(1.01·2^-8); subnormal half-steps 2^-9/448·max|truth| (ue8m0 doubles the scale) + 2^-18",
       .atol = 1e-6, .rtol = 1.0 / 16.0 * (1.0 + 1.0 / 256.0) + 1.01 / 256.0, .cos_diff = 2e-3,
       .atol_rel_max = 1.0 / (512.0 * 448.0) + 1.0 / 262144.0});
}

void TableBuilder::add_prefill() {
  // ---- MHA-form prefill (mla/core/prefill.hpp) vs fp64 truth ---------------------------------
  // Same classes and the same reasoning as the decode entries; the witnesses are measured on
  // every prefill golden by suites/tolerance/test_prefill_tolerance.cpp (it prints them and fails
  // when a witness uses more than half of a bound). Prefill differs from decode in width (q·k
  // over 192, P·V over 128) and in length (a row attends up to every key of its sequence), which
  // the fp32 and bf16 budgets below already cover: they were set for 576/512 wide products and
  // sums over 128K keys.
  //   fp64: the oracle's blocked products in another order than the Python truth's exact sums:
  //   measured <= 1.04e-15·max|truth| (dominant_logit), lse <= 7.1e-15: bound use <= 0.001.
  add({.name = "prefill.out.f64",
       .why = "fp64 prefill vs fp64 truth: only summation order and exp() rounding differ (measured <= "
              "1.04e-15·max|truth|, bound use 0.001); 1e-12 of max|truth| fails any fp32 rounding",
       .atol = 1e-13, .rtol = 1e-12, .cos_diff = 1e-20, .atol_rel_max = 1e-12});
  add({.name = "prefill.lse.f64",
       .why = "fp64 prefill lse vs fp64 truth: max + log(sum) rounds at ~|lse|·1e-16 (measured <= 7.1e-15)",
       .atol = 1e-12, .rtol = 1e-12, .cos_diff = 1e-20});
  //   fp32: logits rounded at ~2^-24·Σ|scale·q·k| amplified by exp() (q std 100), sums over a
  //   sequence's keys. The float32 baseline measured <= 2.1e-5·max|truth| (q_std100), cos
  //   7.7e-12, lse <= 3.2e-5 abs: bound use <= 0.022. The decode bound (2^-10·max|truth|) is kept:
  //   it was set for 128K-key running sums, which long prefill sequences reach, and a result
  //   rounded to bf16 (2^-8 of a value) still fails it.
  add({.name = "prefill.out.f32",
       .why = "fp32 prefill vs fp64 truth: logit rounding amplified by exp() and sums over a sequence (float32 "
              "baseline measured <= 2.1e-5·max|truth|, cos 7.7e-12); 2^-10·max|truth| and cos 1e-7 as for decode "
              "(128K-key sums), a bf16-rounded result fails",
       .atol = 1e-6, .rtol = 1.0 / 1024, .cos_diff = 1e-7, .atol_rel_max = 1.0 / 1024});
  //   lse near 0 under large logits: a row's lse can sit near 0 while its logits are float32 dot
  //   products of magnitude ~100 (q std 100), each rounded at ~2^-24 of Σ|scale·q_i·k_i|; that
  //   error does not shrink with the lse, so neither rtol nor a fixed atol of 1e-5 holds it (a
  //   correct float32 kernel measured 2.0e-5 at lse 0.14). The row's logits are of the size of the
  //   largest |lse| of the tensor, so the absolute bound grows with it: 2^-20·max|lse| (16
  //   float32 ulps). The float32 baseline over 150 drawn q-std-100 cases (max|lse| 300 to 440)
  //   erred by <= 6.7e-5 abs, <= 0.23 of it. On O(1) data it stays below the fixed atol, and
  //   every planted prefill bug stays FAIL (suites/certify, the prefill mutation tests).
  add({.name = "prefill.lse.f32",
       .why = "fp32 prefill lse vs fp64 truth: FlashMLA's fp32 lse bound rel 8.01/65536 (float32 baseline "
              "measured <= 3.2e-5 abs, bound use 0.015); atol 1e-5 for lse ~ 0, at least 2^-20·max|lse| for "
              "lse ~ 0 under logits ~100 (float32 logit rounding, measured <= 0.23 of it)",
       .atol = 1e-5, .rtol = kLseRel, .cos_diff = 1e-7, .atol_rel_max = kLseLogitRounding});
  //   bf16 output (what FlashAttention, FlashInfer and FlashMLA's prefill write): the golden bf16
  //   pipeline (fp32 softmax, P rounded to bf16, bf16 output) measured <= 0.0044·max|truth|
  //   (h128_v3_scale), bound use <= 0.28, cos <= 2.5e-6, lse bound use <= 0.053. The decode
  //   entries' numbers hold it with the same headroom: FlashMLA's element bounds with atol 2 bf16
  //   ulps of max|truth|, FlashAttention's ratio k=2 with a floor of one bf16 rounding; cos 2e-5
  //   >= k² x 2.5e-6.
  add({.name = "prefill.out.bf16",
       .why = "bf16-output prefill: FlashMLA's abs 8e-4 / rel 2.01/128, atol at least 2 bf16 ulps of max|truth| "
              "(the bf16 pipeline uses 0.28 of it), FlashAttention's ratio k=2 + 2^-8·max|truth|, cos 2e-5 >= k² x "
              "the pipeline's 2.5e-6",
       .atol = 8e-4, .rtol = kBf16TwoUlps, .cos_diff = 2e-5, .ratio_k = 2, .ratio_floor_rel = kBf16Rounding,
       .atol_rel_max = 2 * kBf16Ulp});
  add({.name = "prefill.lse.bf16",
       .why = "lse is fp32 inside bf16 prefill kernels: FlashMLA's lse bounds (abs 1e-6, rel 8.01/65536); the bf16 "
              "pipeline uses <= 0.053 of them; float32 logit rounding as prefill.lse.f32: at least 2^-20·max|lse|",
       .atol = 1e-6, .rtol = kLseRel, .cos_diff = 1e-7, .atol_rel_max = kLseLogitRounding});
  //   bf16 operands, fp32 output: P's rounding alone (2^-9 of a weight), as the decode class
  //   attn.out.bf16_operands_f32 reasons. Its witness, the bf16 pipeline without the output
  //   rounding (ref::prefill_same_dtype, f32), measured <= 0.0025·max|truth| (h128_v3_scale), bound
  //   use <= 0.32, cos <= 1.2e-6, never above the bf16-output pipeline's error (ratio <= 1).
  add({.name = "prefill.out.bf16_operands_f32",
       .why = "bf16 operands (P rounded), fp32 sums and output: P's rounding only (witness measured <= "
              "0.0025·max|truth|, bound use 0.32, cos 1.2e-6, ratio <= 1); atol 1 bf16 ulp of max|truth|, rtol 1 "
              "ulp, ratio k=2 + 2^-9·max|truth|, cos 1e-5",
       .atol = 8e-4, .rtol = kBf16Ulp, .cos_diff = 1e-5, .ratio_k = 2, .ratio_floor_rel = kBf16Rounding / 2,
       .atol_rel_max = kBf16Ulp});
}

void TableBuilder::add_sparse_prefill() {
  // ---- sparse prefill's max_logits (mla/core/sparse_prefill.hpp) vs fp64 truth ----------------
  // Its out and lse are judged by the decode entries (the same arithmetic on the same rows). The
  // largest logit of a row is one float32 dot of 576 bf16 products times the scale in every
  // deployed kernel: its error is that of a logit, ~2^-24 of the terms' sum of magnitudes, which
  // does not shrink with the logit itself; so the lse entries' bounds, with the absolute part
  // growing with the tensor's largest |logit| as for the prefill lse (16 float32 ulps of it). The
  // float32 baseline (cpu_sparse_prefill_f32) used <= 0.0057 of it over 30 drawn calls (q std 1 and
  // 30), out <= 0.047 and lse <= 0.075 of their decode entries; the certifier's tests hold it
  // under half (suites/certify/test_certify_drawn_kinds.cpp).
  add({.name = "sparse_prefill.max_logits.f64",
       .why = "fp64 max_logits vs fp64 truth: one dot product in another order (~1e-16 relative)",
       .atol = 1e-12, .rtol = 1e-12, .cos_diff = 1e-20});
  add({.name = "sparse_prefill.max_logits.f32",
       .why = "a float32 logit of bf16 values: FlashMLA's fp32 lse bound rel 8.01/65536, atol 1e-5, at least "
              "2^-20·max|max_logits| (the terms' rounding does not shrink with the logit)",
       .atol = 1e-5, .rtol = kLseRel, .cos_diff = 1e-7, .atol_rel_max = kLseLogitRounding});
}

void TableBuilder::add_merge() {
  // ---- merge of two attention states (mla/core/merge.hpp) vs fp64 truth ----------------------
  // The merged out is the rounding, to the state dtype, of a float32 value: half an ulp of it
  // and the float32 weights' few 2^-24 (exp and one division of exactly representable
  // arguments). The deployed arithmetic and the float32 baseline measured a bound use of 0.98 of
  // half an ulp (h128), so the element bound is one ulp (2.01 half-ulps: double rounding through
  // float32 costs at most that) and they use <= 0.49 of it. An element near 0 (the two sides
  // cancelling) keeps the float32 error of the terms: 2^-20 of max|truth|. cos: uniform rounding
  // of half an ulp gives ~2^-2p/6 (bf16: 2.5e-6, measured 1.2e-6), so 1e-5 / 1e-7 / 1e-12.
  add({.name = "merge.out.f32",
       .why = "merged out in float32: a few float32 roundings (weights, products) of exact inputs; 2^-20 relative "
              "and of max|truth|",
       .atol = 1e-7, .rtol = 1.0 / (1 << 20), .cos_diff = 1e-12, .atol_rel_max = 1.0 / (1 << 20)});
  add({.name = "merge.out.f16",
       .why = "merged out rounded to float16 from float32: one ulp (2.01/2048, the witnesses use <= 0.5 of it), "
              "cancellation 2^-20·max|truth|, cos 1e-7",
       .atol = 1e-7, .rtol = 2.01 / 2048, .cos_diff = 1e-7, .atol_rel_max = 1.0 / (1 << 20)});
  add({.name = "merge.out.bf16",
       .why = "merged out rounded to bf16 from float32: one ulp (2.01/256; the deployed arithmetic and the float32 "
              "baseline use <= 0.49 of it), cancellation 2^-20·max|truth|, cos 1e-5 (measured 1.2e-6)",
       .atol = 1e-7, .rtol = 2.01 / 256, .cos_diff = 1e-5, .atol_rel_max = 1.0 / (1 << 20)});
  add({.name = "merge.lse.f32",
       .why = "merged lse in float32 (m + log(sum) of float32 values): FlashMLA's lse bound rel 8.01/65536, atol "
              "1e-6; the witnesses use <= 0.011 of it; an empty row's -inf must match exactly",
       .atol = 1e-6, .rtol = kLseRel, .cos_diff = 1e-7});
}

void TableBuilder::add_topk() {
  // ---- top-k selection (mla/core/topk.hpp): set dominance at near-ties ---------------------------
  // The truth is the float32 logits the kernel was given, so nothing is computed: the judge
  // (judge/src/topk.cpp) compares the given values of what was selected and what was excluded.
  // A kernel comparing those values exactly needs no tolerance; one that compares them after a
  // monotone float32 transform (the row's max subtracted, a scale: what sampling top-k kernels
  // do) or after rounding them to a narrower type may order a near-tie the other way. The rule:
  // every selected logit >= every excluded valid logit - tol, tol = max(atol, atol_rel_max·M),
  // M = the row's largest |valid logit| (a rounding's size scales with the values compared, and
  // |x - max| <= 2M). Only atol and atol_rel_max apply; rtol and cos_diff do not (unbounded).
  //   f32: fl(fl(x - max)·c) moves a value by <= 2^-24·2M per rounding (2^-23·M) in the
  //   pre-scale units, 2^-22·M for both; a pair is misordered only when its true gap is below
  //   both values' errors, 2^-21·M. tol 2^-20·M keeps 2x over that worst case ("8 ulps" of M:
  //   ulp(M) <= 2^-23·M). Below float32's normal range a rounding is absolute (half of 2^-149):
  //   atol 4·2^-149. Witness (suites/kernels/test_topk_kernels.cpp, measured on random and
  //   near-tie rows, ties broken the other way): the transform's selection uses 0.19 of tol
  //   (near-ties a few float32 ulps apart at -M, the row max +M); exact kernels use 0.
  add({.name = "topk.dominance.f32",
       .why = "top-k comparing float32 logits, possibly through a monotone float32 transform (max subtracted, "
              "scaled): two roundings of values <= 2M misorder a pair only within 2^-21·M; tol 2^-20·M (2x), "
              "atol 4·2^-149 below the normal range; rtol and cos_diff do not apply",
       .atol = 4 * static_cast<double>(std::numeric_limits<float>::denorm_min()), .rtol = kUnbounded,
       .cos_diff = kUnbounded, .atol_rel_max = 1.0 / (1 << 20)});
  //   bf16: the logits rounded to bfloat16 (8 significant bits) before they are compared: each
  //   moves by <= 2^-9·M, a pair is misordered only within 2^-8·M and rounding makes ties the
  //   kernel breaks as it likes; tol 2^-7·M keeps 2x. Witness: selection on the bf16 roundings
  //   with the reverse tie-break uses 0.33 of tol (the prefill rows).
  add({.name = "topk.dominance.bf16",
       .why = "top-k comparing the logits rounded to bfloat16: a pair is misordered (or tied) only within 2^-8·M; "
              "tol 2^-7·M (2x), the same atol; rtol and cos_diff do not apply",
       .atol = 4 * static_cast<double>(std::numeric_limits<float>::denorm_min()), .rtol = kUnbounded,
       .cos_diff = kUnbounded, .atol_rel_max = 1.0 / (1 << 7)});
}

void TableBuilder::add_indexer_append() {
  // ---- V3.2 indexer key cache append (mla/core/indexer_cache.hpp) vs its exact bytes ------------
  // Nothing here is approximate: from a bf16 key and the declared recipe, amax, the float32 scale
  // (one float32 operation, then for ue8m0 an exact power of two) and every code (one correctly
  // rounded float32 quotient, then round-to-nearest-even to e4m3, saturating) have exactly one
  // right answer, the oracle's (mla/ref/indexer_append.hpp). So the bound is zero: every code byte
  // and scale is compared bitwise by the judge (judge/src/indexer_append.cpp), and these entries
  // hold the dequantized comparison of the written slots to the same standard. A kernel whose
  // scales differ by one float32 ulp (the other float32 operation) declares that operation.
  add({.name = "indexer.append.codes",
       .why = "e4m3 codes of the indexer cache vs the oracle's: a deterministic RNE encoding of one correctly "
              "rounded float32 quotient; exact (0), bytes compared bitwise",
       .atol = 0, .rtol = 0, .cos_diff = 0});
  add({.name = "indexer.append.scales",
       .why = "float32 scales of the indexer cache vs the declared recipe's: one float32 operation on amax (ue8m0: "
              "then an exact power of two); exact (0), bytes compared bitwise",
       .atol = 0, .rtol = 0, .cos_diff = 0});
}

void TableBuilder::add_indexer_logits() {
  // ---- V3.2 indexer logits (mla/core/indexer_logits.hpp) vs the exact oracle ---------------------
  // logit = k_scale * sum_h w_h * relu(q8_h . k8), the truth within an ulp of float64
  // (mla/ref/indexer_logits.hpp). A float32 kernel: each q8 * k8 product is exact (4 + 4
  // significant bits, no underflow: >= 2^-18); the 128-term dot in any order errs by at most
  // 127 u sum_d |q k| (u = 2^-24, recursive summation's bound); relu moves no error up (it is
  // 1-Lipschitz); times w_h one rounding; the 64-term head sum at most 63 u of its |terms|; times
  // k_scale one rounding. In all at most ~192 u * B, B = k_scale * sum_h |w_h| * sum_d |q k| per
  // element (the judge computes B with the truth: weights of both signs cancel in the logit, not
  // in the roundings, so the bound scales with B, never with |logit|). 192 u = 2^-16.4; tol
  // 2^-15 * B keeps 2.7x. With H heads the count is 128 + H: the entry holds a float32 kernel up to
  // H = 384 (V3.2 has 64). Subnormal results round absolutely, by half of 2^-149 each: 192 of them
  // stay below 256 * 2^-149 (atol). rtol does not apply. cos_diff: DeepGEMM's own test metric,
  // 1 - 2 sum(xy) / sum(x^2 + y^2) < 1e-3 over the valid logits. Witness
  // (suites/kernels/test_indexer_logits_kernels.cpp, printed as [indexer logits tolerance]):
  // cpu_indexer_logits (forward sums) and a serial float32 loop adding in reverse use 0.012 of tol
  // where every code and weight is positive (no cancellation: the logit is its whole magnitude),
  // 3e-4 with signed weights; the planted kernel that accumulates its dots in bfloat16 uses 19x to
  // 27x and FAILs.
  add({.name = "indexer.logits.f32",
       .why = "indexer logits in float32 vs the exact oracle: 128-term dots, 64-term head sum and two products "
              "round by <= 192·2^-24·B, B = k_scale·Σ|w|·Σ|q·k| per element; tol 2^-15·B (2.7x), atol 256·2^-149 "
              "below the normal range; cos_diff DeepGEMM's 1e-3; -inf mask exact; rtol does not apply",
       .atol = 256 * static_cast<double>(std::numeric_limits<float>::denorm_min()), .rtol = kUnbounded,
       .cos_diff = 1e-3, .atol_rel_max = 1.0 / (1 << 15)});
}

std::vector<Tolerance> build() {
  TableBuilder b;
  b.add_full_precision_attention();
  b.add_deployed_precision_attention();
  b.add_bf16_operand_attention();
  b.add_quantization_info();
  b.add_layer();
  b.add_cache_append();
  b.add_prefill();
  b.add_merge();
  b.add_sparse_prefill();
  b.add_topk();
  b.add_indexer_append();
  b.add_indexer_logits();
  return std::move(b.t);
}

}  // namespace

const std::vector<Tolerance>& table() {
  static const std::vector<Tolerance> t = build();
  return t;
}

const Tolerance& lookup(std::string_view name) {
  for (const auto& t : table()) {
    if (t.name == name) return t;
  }
  std::vector<std::string_view> names;
  for (const auto& t : table()) names.push_back(t.name);
  throw Error(fmt::format("unknown tolerance '{}' (known: {})", name, fmt::join(names, ", ")));
}

const Tolerance& tolerance_for(const PrecisionClass& c, CacheFormat format, std::string_view what) {
  if (what != "out" && what != "lse") {
    throw Error(fmt::format("tolerance_for: unknown result '{}' (expected \"out\" or \"lse\")", what));
  }
  if (auto why = unjudgeable(c)) throw Error(fmt::format("no tolerance entry for precision class {}", *why));
  const bool fp8 = format == CacheFormat::fp8;
  std::string_view suffix;
  switch (c.output) {
    case OutDType::f64: suffix = "f64"; break;
    case OutDType::f32:
      // The operands decide: bf16 tiles (and FP8 dequantized into them) carry a rounding no f32
      // bound allows. Their lse is fp32 either way, as inside a bf16-output kernel.
      if (c.operands != OutDType::bf16) suffix = "f32";
      else if (what == "lse") suffix = fp8 ? "fp8" : "bf16";
      else suffix = fp8 ? "fp8_bf16_operands_f32" : "bf16_operands_f32";
      break;
    case OutDType::bf16: suffix = fp8 ? "fp8" : "bf16"; break;
  }
  return lookup(fmt::format("attn.{}.{}", what, suffix));
}

const Tolerance& prefill_tolerance_for(const PrecisionClass& c, std::string_view what) {
  if (what != "out" && what != "lse") {
    throw Error(fmt::format("prefill_tolerance_for: unknown result '{}' (expected \"out\" or \"lse\")", what));
  }
  if (auto why = unjudgeable(c)) throw Error(fmt::format("no tolerance entry for precision class {}", *why));
  std::string_view suffix;
  switch (c.output) {
    case OutDType::f64: suffix = "f64"; break;
    case OutDType::f32:
      // As for decode: bf16 operands (P rounded to bf16 for P·V) carry a rounding no f32 bound
      // allows; their lse is fp32 as inside a bf16-output kernel.
      if (c.operands != OutDType::bf16) suffix = "f32";
      else suffix = what == "lse" ? "bf16" : "bf16_operands_f32";
      break;
    case OutDType::bf16: suffix = "bf16"; break;
  }
  return lookup(fmt::format("prefill.{}.{}", what, suffix));
}

const Tolerance& tolerance_for(OutDType dtype, CacheFormat format, std::string_view what) {
  return tolerance_for(implied_precision(dtype), format, what);
}

}  // namespace mla::tol
