"""Every tolerance of the Python reference and its tests, in one place."""

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

# `goldens check`: a regenerated catalog vs the one on disk. Integer / byte datasets, stored
# inputs and attributes must be identical; computed values may differ by summation order.
CHECK_FP64_REL = 1e-12  # |a - b| <= rel * max|b| over the dataset (normwise)
CHECK_FP32_REL = 1e-5   # float32 results (fp32 pipeline, same-dtype lse)
CHECK_BF16_REL = 2.0 ** -6  # bf16 results: 4 bf16 ulps at the dataset's largest magnitude
