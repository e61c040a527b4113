#include "mla/ref/indexer_logits.hpp"

#include <array>
#include <cmath>
#include <limits>

#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"

namespace mla::ref {
namespace {


}  // namespace

double exact_sum(std::vector<double> x) {
  // Shewchuk's algorithm: `partials` holds non-overlapping values whose sum is exactly the sum so
  // far; then they are added from the largest with the round-half-even correction at the end.
  std::vector<double> partials;
  for (double v : x) {
    std::size_t i = 0;
    for (double y : partials) {
      if (std::fabs(v) < std::fabs(y)) std::swap(v, y);
      const double hi = v + y, lo = y - (hi - v);
      if (lo != 0.0) partials[i++] = lo;
      v = hi;
    }
    partials.resize(i);
    partials.push_back(v);
  }
  std::size_t n = partials.size();
  if (n == 0) return 0.0;
  double hi = partials[--n], lo = 0.0;
  while (n > 0) {
    const double a = hi, b = partials[--n];
    hi = a + b;
    lo = b - (hi - a);
    if (lo != 0.0) break;
  }
  // hi + lo is exact; when lo is exactly half an ulp of hi and the partials below push the same
  // way, the correctly rounded sum is the next float64 away.
  if (n > 0 && ((lo < 0 && partials[n - 1] < 0) || (lo > 0 && partials[n - 1] > 0))) {
    const double y = lo * 2, v = hi + y;
    if (y == v - hi) hi = v;
  }
  return hi;
}

IndexerLogitSum indexer_logit_sum(const IndexerLogitsInputs& in, int64_t row, const uint8_t* key, bool relu) {
  const int64_t heads = in.shape.heads;
  const auto& val = e4m3_table();
  const uint8_t* q = in.q.data() + row * heads * kIndexerHeadDim;
  const float* w = in.weights.data() + row * heads;
  std::vector<double> parts;
  parts.reserve(static_cast<std::size_t>(2 * heads));
  IndexerLogitSum out;
  for (int64_t h = 0; h < heads; ++h) {
    double dot = 0, abs_dot = 0;  // exact (the header's argument)
    for (int64_t d = 0; d < kIndexerHeadDim; ++d) {
      const double x = val[q[h * kIndexerHeadDim + d]] * val[key[d]];
      dot += x;
      abs_dot += std::fabs(x);
    }
    const double wh = w[h], r = relu ? std::max(dot, 0.0) : dot, term = wh * r;
    parts.push_back(term);
    parts.push_back(std::fma(wh, r, -term));  // the product's exact remainder
    out.magnitude += std::fabs(wh) * abs_dot;
  }
  out.sum = exact_sum(std::move(parts));
  return out;
}

IndexerLogitsTruth indexer_logits_reference(const IndexerLogitsInputs& in) {
  validate_indexer_logits_inputs(in, "indexer_logits_reference");
  const auto& s = in.shape;
  const int64_t rows = s.rows(), cols = s.cols();
  IndexerLogitsTruth t;
  t.logits.assign(static_cast<std::size_t>(rows * cols), -std::numeric_limits<double>::infinity());
  t.magnitude.assign(static_cast<std::size_t>(rows * cols), 0.0);
  parallel_for(static_cast<std::size_t>(rows), 1, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const auto range = indexer_logits_range(in, static_cast<int64_t>(r));
      for (int64_t p = range.begin; p < range.end; ++p) {
        const auto k = indexer_logits_key(in, static_cast<int64_t>(r), p);
        const auto sum = indexer_logit_sum(in, static_cast<int64_t>(r), k.codes);
        const std::size_t at = r * static_cast<std::size_t>(cols) + static_cast<std::size_t>(p);
        t.logits[at] = sum.sum * static_cast<double>(k.scale);
        t.magnitude[at] = sum.magnitude * static_cast<double>(k.scale);
      }
    }
  });
  return t;
}

}  // namespace mla::ref
