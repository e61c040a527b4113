// Rotary embedding of DeepSeek MLA in float64: YaRN-corrected inverse frequencies (upstream
// `precompute_freqs_cis`). The softmax scale with its mscale² factor is mla::softmax_scale
// (mla/core/config.hpp).
//
// Why float64 throughout: upstream builds the table in float32, which drifts by up to 6e-4 rad
// near position 16383 (docs/field.md, "Upstream semantics"); the truth must not inherit that.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mla/core/config.hpp"

namespace mla::ref {

// The dimension at which a frequency completes `num_rotations` turns over `original_seq_len`
// positions: dim·ln(original_seq_len/(num_rotations·2π)) / (2·ln(base)).
double yarn_correction_dim(double num_rotations, int64_t dim, double base, int64_t original_seq_len);

// low = floor(corr(beta_fast)), high = ceil(corr(beta_slow)), clamped to [0, dim-1] as upstream
// does (dim is the rope head dim, although the ramp only has dim/2 entries).
struct YarnRange {
  int64_t low = 0;
  int64_t high = 0;
};
YarnRange yarn_correction_range(const ModelConfig& cfg);

// The ramp over `n` entries: clamp((i - low)/(high - low), 0, 1), with high += 0.001 when equal.
std::vector<double> yarn_linear_ramp(double low, double high, int64_t n);

// inv_freq[i] = base^(-2i/dim) for i < dim/2; under YaRN (max_seq_len > original_seq_len)
// f/factor·(1-smooth) + f·smooth with smooth = 1 - ramp. Throws mla::Error on an odd or
// non-positive rope dim or a non-positive base/factor.
std::vector<double> rope_inv_freq(const ModelConfig& cfg);

// Rotates interleaved pairs (2i, 2i+1) of `v` (length 2·inv_freq.size()) by pos·inv_freq[i].
void apply_rope(std::span<double> v, int64_t pos, std::span<const double> inv_freq);

}  // namespace mla::ref
