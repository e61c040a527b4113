// A plain-loop float64 oracle of the attention core over *logical* values: per sequence its
// queries and its tokens in logical order, no pages, no block table, no cache format.
//
// Why a second fp64 oracle: attention_fp64 (attention.hpp) and every kernel share the paged
// layout's interpretation (block table, slots, formats, the dense/sparse position rules of
// mla/core/attention.hpp); this one shares none of it. A layout bug common to the paged oracle
// and a kernel cannot hide from it, and a test laying one logical problem out with another page
// size, block permutation or batch order compares against the same numbers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mla/ref/attention.hpp"

namespace mla::ref {

struct LogicalAttention {
  int s_q = 1;
  int heads = 1;
  int topk = 0;  // sparse when > 0
  bool causal = true;
  double softmax_scale = 0;
  std::vector<std::vector<uint16_t>> q;       // per sequence: [s_q, h, 576] bf16 bits
  std::vector<std::vector<double>> values;    // per sequence: [L, 576] exact values (fp8: dequantized)
  std::vector<std::vector<int32_t>> indices;  // per sequence: [s_q, topk]
};

// Straight loops in float64 over the logical values, sequences in `order` (empty: identity):
// dense query s of a sequence of L tokens attends 0 .. min(L - s_q + s, L - 1) when causal, all
// L otherwise; sparse, the row's indices in [0, L). out [b, s_q, h, 512], lse [b, h, s_q].
AttnResult attention_plain_loop(const LogicalAttention& p, std::span<const int> order = {});

}  // namespace mla::ref
