#include "mla/core/config.hpp"

#include <cmath>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

double softmax_scale(const ModelConfig& cfg) {
  const int64_t d = cfg.qk_head_dim();
  if (d <= 0) throw Error(fmt::format("qk_nope_head_dim + qk_rope_head_dim = {} must be > 0", d));
  // pow(d, -0.5) rather than 1/sqrt(d): the same operation as upstream's `d ** -0.5`.
  double s = std::pow(static_cast<double>(d), -0.5);
  if (cfg.yarn()) {
    if (!(cfg.rope_factor > 0.0)) throw Error(fmt::format("rope_factor={} must be > 0", cfg.rope_factor));
    const double m = 0.1 * cfg.mscale * std::log(cfg.rope_factor) + 1.0;
    s = s * m * m;
  }
  return s;
}

}  // namespace mla
