"""Every tolerance of the Python reference and its tests, in one place.

(The bounds an implementation is judged by live in the C++ table, core/src/tolerance_table.cpp;
nothing here is one of them.)"""

# naive vs absorbed form of the full layer, float64 (relative to the output's max magnitude)
NAIVE_VS_ABSORBED_FP64_REL = 1e-12
# attention-core form vs the full layer's absorbed latent output, float64 (relative to max magnitude)
CORE_VS_LAYER_FP64_REL = 1e-12
# page permutation: a re-paged cache must give the same result (float64 sums may reorder: none here)
PAGE_PERMUTATION_REL = 0.0
# YaRN inverse frequencies vs the closed form (both float64)
YARN_FREQ_REL = 1e-15
# softmax-scale constants quoted in docs/field.md ("Upstream semantics") to 10 decimals
SOFTMAX_SCALE_ABS = 5e-11
# sanity: pipelines vs the fp64 truth on the tiny preset (relative to the output's max magnitude)
FP32_VS_FP64_REL = 1e-5
BF16_VS_FP64_REL = 0.05

# `goldens check`: a regenerated catalog vs the one on disk, possibly under another torch/numpy.
#  * What defines a case — attributes (softmax_scale included), every input (stored or the
#    sha256 of a generated one), rope/inv_freq, the exact FP8 dequantization, needle overlays —
#    must be identical: it is computed by fixed integer / correctly rounded algorithms.
#  * The fp64 truth (truth/*, unquantized/*, the fp64 pipeline, its intermediates and caches)
#    must agree to 1e-3 of the bound an fp64 implementation is held to (1e-12 of the largest
#    magnitude, core/src/tolerance_table.cpp attn.out.f64): its sums are order-independent
#    (mla_ref.exact.matmul), only exp/log/rsqrt may differ in their last bit.
#  * Deployed-precision results (same_dtype/*, the fp32 and bf16 pipelines) are what a kernel
#    with torch's summation order computes; they may move within these bounds.
CHECK_TRUTH_REL = 1e-3 * 1e-12  # |a - b| <= rel * max|b| over the dataset (normwise)
CHECK_FP32_REL = 1e-5   # float32 results (fp32 pipeline, same-dtype lse)
CHECK_BF16_REL = 2.0 ** -6  # bf16 results: 4 bf16 ulps at the dataset's largest magnitude
CHECK_FP16_REL = 2.0 ** -9  # float16 results (merge): 4 float16 ulps at the largest magnitude

# lightning indexer (mla_ref.indexer), all relative to the largest magnitude compared:
# the fp64 Hadamard (exact.matmul, then one scale rounding) vs a plain float64 matrix product
INDEXER_HADAMARD_FP64_REL = 1e-15
# fp64 q.k dot products of the two RoPE layouts on correspondingly permuted weights (equal in
# exact arithmetic; a few float64 roundings through the projection, LayerNorm and rotation apart)
INDEXER_ROPE_LAYOUTS_FP64_REL = 1e-13
# logits_truth vs a plain float64 einsum of the same formula (the einsum's own rounding over the
# head sum, ~H ulps) and vs the formula on dequantized values with unfolded scales
INDEXER_TRUTH_VS_EINSUM_REL = 1e-14
# the float32 deployed logits (fp8_index's arithmetic) vs the float64 truth of the same operands
INDEXER_DEPLOYED_VS_TRUTH_REL = 1e-5

# prefill (MHA form) and merge of partial states (mla_ref.prefill, mla_ref.merge), float64,
# relative to the largest magnitude compared:
# prefill_attention's truth vs a plain float64 numpy softmax over the same operands
PREFILL_VS_NUMPY_FP64_REL = 1e-12
# a context chunk and a causal part merged vs the one-call causal prefill (a few roundings apart)
PREFILL_SPLIT_MERGE_FP64_REL = 1e-13
