// Synthetic attention-core inputs for the unit tests, built the way the goldens are (paged,
// poisoned, sentinel block ids, invalid sparse indices) but small, and an independent
// plain-loop float64 oracle to hold implementations to.
//
// Content is generated per *logical* sequence and then laid out, so the same logical problem
// can be laid out with another page size, another physical block permutation or another batch
// order: that is what the invariance tests compare.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/kernels/attention.hpp"

namespace mla::testing {

inline constexpr int32_t kSentinel = 2147483647;

struct AttnSpec {
  std::vector<int32_t> seqlens{37, 0, 130};
  int s_q = 1;
  int heads = 8;
  int topk = 0;  // sparse when > 0
  CacheFormat format = CacheFormat::bf16;
  ScaleFmt scale_fmt = ScaleFmt::fp32;
  bool causal = true;
  double softmax_scale = 0.1352337789;  // V3's, any positive value would do
  double q_std = 1.0;
  double kv_std = 1.0;
  uint64_t seed = 1;
};

struct Logical {
  AttnSpec spec;
  std::vector<std::vector<uint16_t>> q;       // per sequence: [s_q, h, 576] bf16 bits
  std::vector<std::vector<uint8_t>> tokens;   // per sequence: [L, bytes_per_token]
  std::vector<std::vector<double>> values;    // per sequence: [L, 576] exact values (fp8: dequantized)
  std::vector<std::vector<int32_t>> indices;  // per sequence: [s_q, topk]
};
Logical make_logical(const AttnSpec& spec);

struct Layout {
  int page_size = 16;
  uint64_t perm_seed = 7;   // permutation of the physical blocks
  std::vector<int> order;   // built sequence i = logical sequence order[i]; empty: identity
  int spare_blocks = 3;     // physical blocks no sequence uses (poisoned)
  int spare_table = 2;      // block-table entries past the longest sequence (sentinel)
};

struct Paged : AttnBuffers {
  AttnInputs inputs() const { return view(); }
};
Paged lay_out(const Logical& lg, const Layout& layout);

struct Expected {
  std::vector<double> out;  // [b, s_q, h, 512]
  std::vector<double> lse;  // [b, h, s_q]
};
// Straight loops in float64 over the logical values, sequences in `order` (empty: identity).
Expected oracle(const Logical& lg, const std::vector<int>& order = {});

std::vector<int64_t> out_shape(const AttnShape& s);  // {b, s_q, h, 512}
std::vector<int64_t> lse_shape(const AttnShape& s);  // {b, h, s_q}

}  // namespace mla::testing
