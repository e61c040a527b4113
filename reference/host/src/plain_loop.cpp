#include "mla/ref/plain_loop.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "mla/core/numeric.hpp"

namespace mla::ref {

AttnResult attention_plain_loop(const LogicalAttention& lg, std::span<const int> order_in) {
  std::vector<int> order(order_in.begin(), order_in.end());
  if (order.empty()) {
    order.resize(lg.values.size());
    std::iota(order.begin(), order.end(), 0);
  }
  const int64_t B = static_cast<int64_t>(order.size()), SQ = lg.s_q, H = lg.heads;
  AttnResult e;
  e.out.assign(static_cast<std::size_t>(B * SQ * H) * kDv, 0.0);
  e.lse.assign(static_cast<std::size_t>(B * H * SQ), std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < B; ++i) {
    const std::size_t o = static_cast<std::size_t>(order[static_cast<std::size_t>(i)]);
    const std::vector<double>& v = lg.values[o];
    const int64_t L = static_cast<int64_t>(v.size()) / kDqk;
    for (int64_t s = 0; s < SQ; ++s) {
      std::vector<int64_t> pos;
      if (lg.topk == 0) {
        const int64_t last = lg.causal ? L - SQ + s : L - 1;
        for (int64_t t = 0; t <= std::min(last, L - 1); ++t) pos.push_back(t);
      } else {
        for (int64_t k = 0; k < lg.topk; ++k) {
          const int32_t idx = lg.indices[o][static_cast<std::size_t>(s * lg.topk + k)];
          if (idx >= 0 && idx < L) pos.push_back(idx);
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        if (pos.empty()) continue;
        const uint16_t* q = lg.q[o].data() + (s * H + h) * kDqk;
        std::vector<double> sc(pos.size());
        double mx = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < pos.size(); ++j) {
          double dot = 0;
          for (int64_t d = 0; d < kDqk; ++d) dot += static_cast<double>(bf16_to_float(q[d])) * v[pos[j] * kDqk + d];
          sc[j] = dot * lg.softmax_scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        double* out = e.out.data() + ((i * SQ + s) * H + h) * kDv;
        for (std::size_t j = 0; j < pos.size(); ++j) {
          for (int64_t d = 0; d < kDv; ++d) out[d] += sc[j] / sum * v[pos[j] * kDqk + d];
        }
        e.lse[static_cast<std::size_t>((i * H + h) * SQ + s)] = mx + std::log(sum);
      }
    }
  }
  return e;
}

}  // namespace mla::ref
