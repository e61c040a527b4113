// The prefill and merge axes of the benchmarks, declared once as data beside the decode axes
// (axes.hpp: the same tiers, explicit seeds and `scaled_from` rule).
//
// Prefill is the compute-bound end of the roofline (MHA form, mla/core/prefill.hpp: 2·(192 + 128)
// FLOPs per attended pair and head over bf16 q/k/v read once), merge the memory-bound end (three
// FLOPs per value over two partial states read and one written, mla/core/merge.hpp). Production
// points (tier `gpu`) are the shapes deployed prefill kernels are measured on; the fp64 oracle
// (mla::ref::prefill_attention) judges every kernel before it is timed, so the CPU tiers hold
// reduced points, each naming the production point it was reduced from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mla/core/merge.hpp"
#include "mla/core/prefill.hpp"
#include "mla/workloads/axes.hpp"

namespace mla::axes {

// One sequence of a prefill call: its query rows and key rows (s_q < s_k: a chunk over a cached
// prefix, bottom-right causal).
struct PrefillSeq {
  int32_t s_q = 0, s_k = 0;
};

struct PrefillPoint {
  std::string name;  // unique among every axis point (decode, prefill, merge), [a-z0-9_]+
  std::string why;
  std::string scaled_from;  // empty for production shapes
  unsigned tiers = 0;       // Tier bits
  int heads = 0;
  bool causal = true;
  std::vector<PrefillSeq> seqs;
  double q_std = 1.0;
  uint64_t seed = 0;

  bool in(Tier t) const { return (tiers & t) != 0; }
  int64_t total_q() const;
  int64_t total_k() const;
};

// How the lse of a merge point's rows is drawn: every row finite, or the rows cycling through
// the empty sides a merge meets (a empty as +inf, b empty as -inf, both empty, finite).
enum class MergeRows { finite, empty_sides };

struct MergePoint {
  std::string name;
  std::string why;
  std::string scaled_from;
  unsigned tiers = 0;
  MergeShape shape;
  MergeRows rows = MergeRows::finite;
  uint64_t seed = 0;

  bool in(Tier t) const { return (tiers & t) != 0; }
};

// The tables, in a fixed order; nullptr when absent; the points of tier `t` in table order.
const std::vector<PrefillPoint>& prefill_catalog();
const std::vector<MergePoint>& merge_catalog();
const PrefillPoint* find_prefill(std::string_view name);
const MergePoint* find_merge(std::string_view name);
std::vector<const PrefillPoint*> select_prefill(Tier t);
std::vector<const MergePoint*> select_merge(Tier t);

// Prefill inputs of `seqs` from the counter-based generator, keyed by `seed`: q bf16 with std
// `q_std` (stream 1), k and v bf16 with std 1 (streams 2, 3), and the rope part of k (its last 64
// of 192) one k_pe per token (stream 4) shared by every head, as MLA's MHA form has it. The
// certifier's drawn prefill cases are built by the same function.
PrefillBuffers build_prefill(uint64_t seed, int heads, bool causal, const std::vector<PrefillSeq>& seqs, double q_std,
                             double softmax_scale);
// A point's inputs: build_prefill with DeepSeek-V3's softmax scale (deepseek_v3_softmax_scale).
PrefillBuffers build_inputs(const PrefillPoint& p);
// A merge point's inputs: finite lse uniform in [-5, 20] (the order a prefill writes, stream 1),
// outs of std 1 (streams 2 and 3) rounded to the state dtype; an empty side's out is NaN, which
// the merge must never read.
MergeBuffers build_inputs(const MergePoint& p);

// Host bytes of a point's canonical inputs.
std::size_t input_bytes(const PrefillPoint& p);
std::size_t input_bytes(const MergePoint& p);

}  // namespace mla::axes
