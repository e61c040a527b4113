// The indexer logits' oracle (mla/core/indexer_logits.hpp): the float64 scores of the given
// codes, scales and weights, computed so that the result does not depend on any summation order.
// Every indexer logits kernel is judged against it (mla/judge/indexer_logits.hpp).
//
// Why it is exact up to two roundings: an e4m3 value is a multiple of 2^-9 below 2^9, so a
// product of two is a multiple of 2^-18 below 2^18 and a dot of 128 of them is a multiple of
// 2^-18 below 2^25: 43 bits, exact in float64 in any order. Each head's term weight * relu(dot)
// is split exactly into two float64 values (fma), and the 2 * heads parts are summed correctly
// rounded (Shewchuk's exact partials, as Python's math.fsum); the product with the float32
// k_scale is the second rounding (none for a power-of-two ue8m0 scale). So each logit is within
// one float64 ulp of the real value (two with a non-power-of-two scale), whatever the order.
#pragma once

#include <vector>

#include "mla/core/indexer_logits.hpp"

namespace mla::ref {

struct IndexerLogitsTruth {
  // [rows, cols]: the logits, -inf outside each row's valid range.
  std::vector<double> logits;
  // [rows, cols]: k_scale * sum_h |weight_h| * sum_d |q8_hd * k8_d|, the size of the terms a
  // float32 kernel rounds on the way to the logit (0 outside the range): what its error scales
  // with, since weights of both signs cancel in the logit but not in its roundings.
  std::vector<double> magnitude;
};

// Validates first (validate_indexer_logits_inputs), so a rejected call computes nothing.
IndexerLogitsTruth indexer_logits_reference(const IndexerLogitsInputs& in);

// One logit of row `row` against the key codes `key` (128), before the key's scale: `sum` the
// correctly rounded sum_h w_h * relu(q8_h . k8) (`relu` false: of the dots as they are, what a
// kernel without the relu computes), `magnitude` sum_h |w_h| * sum_d |q8_hd * k8_d|. The judge
// prices its hypotheses about a wrong kernel with it; `in` validated, no NaN code in `key`.
struct IndexerLogitSum {
  double sum = 0, magnitude = 0;
};
IndexerLogitSum indexer_logit_sum(const IndexerLogitsInputs& in, int64_t row, const uint8_t* key, bool relu = true);

// A correctly rounded float64 sum of `x` (any order gives the same result); `x` finite.
double exact_sum(std::vector<double> x);

}  // namespace mla::ref
