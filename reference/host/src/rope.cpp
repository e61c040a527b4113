#include "mla/ref/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla::ref {

namespace {

void check_rope_args(const ModelConfig& cfg) {
  if (cfg.qk_rope_head_dim <= 0 || cfg.qk_rope_head_dim % 2 != 0) {
    throw Error(fmt::format("qk_rope_head_dim={} must be positive and even (RoPE rotates pairs)",
                            cfg.qk_rope_head_dim));
  }
  if (!(cfg.rope_theta > 1.0) || !std::isfinite(cfg.rope_theta)) {
    throw Error(fmt::format("rope_theta={} must be finite and > 1", cfg.rope_theta));
  }
  if (cfg.yarn()) {
    if (!(cfg.rope_factor > 0.0) || !std::isfinite(cfg.rope_factor)) {
      throw Error(fmt::format("rope_factor={} must be finite and > 0 under YaRN", cfg.rope_factor));
    }
    if (!(cfg.beta_fast > 0.0) || !(cfg.beta_slow > 0.0)) {
      throw Error(fmt::format("beta_fast={} and beta_slow={} must be > 0", cfg.beta_fast, cfg.beta_slow));
    }
    if (cfg.original_seq_len <= 0) {
      throw Error(fmt::format("original_seq_len={} must be > 0", cfg.original_seq_len));
    }
  }
}

}  // namespace

double yarn_correction_dim(double num_rotations, int64_t dim, double base, int64_t original_seq_len) {
  return static_cast<double>(dim) *
         std::log(static_cast<double>(original_seq_len) / (num_rotations * 2 * std::numbers::pi)) /
         (2 * std::log(base));
}

YarnRange yarn_correction_range(const ModelConfig& cfg) {
  check_rope_args(cfg);
  const int64_t dim = cfg.qk_rope_head_dim;
  const double low = std::floor(yarn_correction_dim(cfg.beta_fast, dim, cfg.rope_theta, cfg.original_seq_len));
  const double high = std::ceil(yarn_correction_dim(cfg.beta_slow, dim, cfg.rope_theta, cfg.original_seq_len));
  // Clamp in double first: a tiny original_seq_len gives a large negative dimension.
  return {static_cast<int64_t>(std::max(low, 0.0)),
          static_cast<int64_t>(std::min(high, static_cast<double>(dim - 1)))};
}

std::vector<double> yarn_linear_ramp(double low, double high, int64_t n) {
  if (low == high) high += 0.001;  // upstream's guard against 0/0
  std::vector<double> r(static_cast<std::size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    r[static_cast<std::size_t>(i)] = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
  }
  return r;
}

std::vector<double> rope_inv_freq(const ModelConfig& cfg) {
  check_rope_args(cfg);
  const int64_t dim = cfg.qk_rope_head_dim;
  const int64_t half = dim / 2;
  std::vector<double> f(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    f[static_cast<std::size_t>(i)] =
        1.0 / std::pow(cfg.rope_theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  if (cfg.yarn()) {
    const YarnRange r = yarn_correction_range(cfg);
    const std::vector<double> ramp =
        yarn_linear_ramp(static_cast<double>(r.low), static_cast<double>(r.high), half);
    for (std::size_t i = 0; i < f.size(); ++i) {
      const double smooth = 1.0 - ramp[i];
      f[i] = f[i] / cfg.rope_factor * (1.0 - smooth) + f[i] * smooth;
    }
  }
  return f;
}

void apply_rope(std::span<double> v, int64_t pos, std::span<const double> inv_freq) {
  if (v.size() != 2 * inv_freq.size()) {
    throw Error(fmt::format("apply_rope: {} values for {} frequencies (need 2 per frequency)", v.size(),
                            inv_freq.size()));
  }
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    const double x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
  }
}

}  // namespace mla::ref
