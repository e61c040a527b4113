// Synthetic attention-core inputs for the unit tests, built the way the goldens are (paged,
// poisoned, sentinel block ids, invalid sparse indices) but small, with the logical problem
// they lay out, for the plain-loop float64 oracle (mla/ref/plain_loop.hpp) to hold
// implementations to.
//
// Content is generated per *logical* sequence and then laid out, so the same logical problem
// can be laid out with another page size, another physical block permutation or another batch
// order: that is what the invariance tests compare.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/core/attention.hpp"
#include "mla/core/config.hpp"
#include "mla/core/presets.hpp"
#include "mla/ref/plain_loop.hpp"

namespace mla::testing {

inline constexpr int32_t kSentinel = 2147483647;

inline double softmax_scale_v3() { return mla::softmax_scale(preset("v3").config); }

struct AttnSpec {
  std::vector<int32_t> seqlens{37, 0, 130};
  int s_q = 1;
  int heads = 8;
  int topk = 0;  // sparse when > 0
  CacheFormat format = CacheFormat::bf16;
  ScaleFmt scale_fmt = ScaleFmt::fp32;
  bool causal = true;
  double softmax_scale = softmax_scale_v3();  // V3's, any positive value would do
  double q_std = 1.0;
  double kv_std = 1.0;
  uint64_t seed = 1;
};

// The logical problem (per sequence q, exact token values and indices: the plain-loop oracle's
// input) and the bytes of its tokens in the spec's cache format.
struct Logical : ref::LogicalAttention {
  AttnSpec spec;
  std::vector<std::vector<uint8_t>> tokens;   // per sequence: [L, bytes_per_token]
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

// The plain-loop oracle of the logical problem, sequences in `order` (empty: identity).
inline ref::AttnResult oracle(const Logical& lg, const std::vector<int>& order = {}) {
  return ref::attention_plain_loop(lg, order);
}

}  // namespace mla::testing
