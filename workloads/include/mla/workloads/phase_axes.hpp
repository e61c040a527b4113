// The prefill and merge axes of the benchmarks, declared once as data beside the decode axes
// (axes.hpp: the same tiers, explicit seeds and `scaled_from` rule).
//
// Prefill is the compute-bound end of the roofline (MHA form, mla/core/prefill.hpp: 2·(192 + 128)
// FLOPs per attended pair and head over bf16 q/k/v read once), merge the memory-bound end (three
// FLOPs per value over two partial states read and one written, mla/core/merge.hpp). Production
// points (tier `gpu`) are the shapes deployed prefill kernels are measured on; the fp64 oracle
// (mla::ref::prefill_attention) judges every kernel before it is timed, so the CPU tiers hold
// reduced points, each naming the production point it was reduced from.
//
// The indexer logits (mla/core/indexer_logits.hpp): every decode step reads each sequence's whole
// 132-byte-per-token indexer cache once and writes one float32 logit per (query row, position).
// Each key is scored by all 64 heads, so the cost model puts about 2 * 64 * 128 FLOPs on each
// 132-byte key (per query row): right of a CPU's fp32 ridge, and left of the ridge of hardware
// whose FP8 throughput per byte of bandwidth is higher than that. Its points are paged (the decode
// call, next_n 1 and 2) and ragged (the prefill call); the exact oracle judges every kernel before
// it is timed.
//
// The top-k (mla/core/topk.hpp) selects V3.2's 2048 keys from each row of those logits: no
// arithmetic (its cost model counts bytes only), measured in logits read per second.
//
// The sparse prefill (mla/core/sparse_prefill.hpp, FlashMLA's flash_mla_sparse_fwd) then attends
// each query token's 2048 selected keys: 2 * (576 + 512) FLOPs per (row, key, head) over a gather
// of 1152-byte rows, so with 64 or 128 heads sharing each gathered row it sits on the compute side
// of every roofline, as a dense prefill does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mla/core/indexer_logits.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"
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

// An indexer logits point. Paged: `batch` sequences of `context` tokens each, `next_n` query
// tokens per sequence, the keys on a shuffled pool of `block_size`-token blocks, the logits
// `context` wide. Ragged: `batch` query rows (a prefill chunk's tokens) over `context` keys,
// bottom-right causal (row r sees keys [0, context - batch + r + 1)), next_n 1.
struct IndexerLogitsPoint {
  std::string name;
  std::string why;
  std::string scaled_from;
  unsigned tiers = 0;
  IndexerLogitsLayout layout = IndexerLogitsLayout::paged;
  int64_t batch = 0;
  int next_n = 1;
  int64_t heads = 64;       // V3.2's index_n_heads
  int64_t block_size = 64;  // paged
  int64_t context = 0;
  uint64_t seed = 0;

  bool in(Tier t) const { return (tiers & t) != 0; }
};

// How a top-k point's rows are laid out: a decode step's (row r one sequence, its range [0, len_r)
// with len_r drawn in [n/2, n], the last row n), a prefill batch's (two sequences packed as
// DeepGEMM's ragged logits are: the first half of the rows over keys [0, n/2), the second over
// [n/2, n), each bottom-right causal, so the second's ranges start at n/2 and a relative index
// differs from an absolute one), or the edges (ranges of 0, 1, k - 1, k, k + 1 and n positions,
// every other one starting at 5, a third of each range masked with -inf, the values on a grid of
// 1/4 so that ties are exact). Outside a row's range the logits are NaN (a kernel must never read
// them), except after a prefill row's range: there its causal future's logits, finite and larger
// than every valid one (what the ragged logits hold unless cleaned), so a selection that scans
// past the range end takes them.
enum class TopkRows { decode, prefill, edge };

struct TopkPoint {
  std::string name;
  std::string why;
  std::string scaled_from;
  unsigned tiers = 0;
  TopkShape shape;
  TopkRows rows = TopkRows::decode;
  uint64_t seed = 0;

  bool in(Tier t) const { return (tiers & t) != 0; }
};

// A sparse prefill point: the `s_q` newest tokens of a sequence of `s_kv` (bottom-right causal,
// row i at position s_kv - s_q + i), each row's indices the top-k's output: `topk` distinct
// positions the row may see, in drawn order, or all of them (drawn order) followed by -1 when it
// sees fewer than `topk` (the first rows of a sequence prefilled from its start). `edge` adds the
// invalid entries a kernel must skip: every other kind of entry that is no key (-2, INT32_MIN,
// s_kv, INT32_MAX) in place of the -1 padding on odd rows, and one row with no key at all.
struct SparsePrefillPoint {
  std::string name;
  std::string why;
  std::string scaled_from;
  unsigned tiers = 0;
  int heads = 0;
  int64_t s_q = 0, s_kv = 0;
  int topk = 2048;  // V3.2's index_topk
  bool edge = false;
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
const std::vector<IndexerLogitsPoint>& indexer_logits_catalog();
const IndexerLogitsPoint* find_indexer_logits(std::string_view name);
std::vector<const IndexerLogitsPoint*> select_indexer_logits(Tier t);
const std::vector<TopkPoint>& topk_catalog();
const TopkPoint* find_topk(std::string_view name);
std::vector<const TopkPoint*> select_topk(Tier t);
const std::vector<SparsePrefillPoint>& sparse_prefill_catalog();
const SparsePrefillPoint* find_sparse_prefill(std::string_view name);
std::vector<const SparsePrefillPoint*> select_sparse_prefill(Tier t);

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
// An indexer logits point's inputs: q codes e4m3(N(0, 100) clamped to 448) (stream 1), head
// weights N(0, 3.75e-4) (stream 2: 1/sqrt(64 heads) times a q scale), each key's 128 codes
// e4m3(N(0, 100)) (stream 3) with a power-of-two scale in [2^-12, 2^-4] (stream 4, a ue8m0 scale's
// form); paged: the blocks a shuffled permutation of the pool (stream 5), the bytes no sequence
// reads and the block-table entries past a sequence's last block garbage.
IndexerLogitsBuffers build_inputs(const IndexerLogitsPoint& p);
// A top-k point's inputs: the ranges of its TopkRows, logits N(0, 1) in float32 inside them
// (stream 1; the edge rows' rounded to multiples of 1/4, every third masked), NaN outside.
TopkBuffers build_inputs(const TopkPoint& p);
// The logits a top-k call reads: the sum of its rows' range lengths (its logits_per_second), of
// given inputs or of a point's (from its ranges alone, no logits drawn).
int64_t logits_read(const TopkInputs& in);
int64_t logits_read(const TopkPoint& p);
// A sparse prefill point's inputs: q bf16 N(0, 1) [s_q, h, 576] (stream 1), kv bf16 N(0, 1)
// [s_kv, 576] (stream 2), the indices of its rows (the point's rule; each row's positions the
// first `topk` of a permutation of what it may see, stream 3 keyed by the row), DeepSeek-V3's
// softmax scale; no sink, no topk_length (FlashMLA's earliest interface: every sparse prefill
// kernel takes it).
SparsePrefillBuffers build_inputs(const SparsePrefillPoint& p);

// Host bytes of a point's canonical inputs.
std::size_t input_bytes(const PrefillPoint& p);
std::size_t input_bytes(const MergePoint& p);
std::size_t input_bytes(const IndexerLogitsPoint& p);
std::size_t input_bytes(const TopkPoint& p);
std::size_t input_bytes(const SparsePrefillPoint& p);

}  // namespace mla::axes
