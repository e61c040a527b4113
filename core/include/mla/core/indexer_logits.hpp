// The indexer logits contract: DeepSeek-V3.2's lightning-indexer scores, the call DeepGEMM's
// fp8_paged_mqa_logits makes on a decode step (paged: the keys in their 132-byte cache) and its
// ragged prefill variant fp8_mqa_logits makes (ragged: the keys as one contiguous run). The
// reference's mla_ref/indexer.py (logits_truth) computes the same scores; the top-k contract
// (mla/core/topk.hpp) then selects from them.
//
// Per query row r and key position p inside the row's valid range:
//   logits[r, p] = k_scale[p] * sum_h weights[r, h] * relu(q8[r, h] . k8[p])
// q8, k8 the e4m3 values of the codes (128 per head and per key), the dot over those 128.
//
// Where the q scales are. V3.2 quantizes q with one scale per (token, head) (act_quant, one
// block of 128 per head) and folds it into the head weights before the call: upstream's
// weights = weights_proj(x) * H^-1/2 * q_scale * D^-1/2. So the kernel takes q as bare e4m3 codes
// and float32 weights [rows, heads] that already carry q_scale (DeepGEMM's API: q float8
// [batch, next_n, heads, 128], weights float32 [batch * next_n, heads]); no q scale is passed.
// The k scale is not folded: it is per key and read beside the codes (paged: from the block's
// scale area, mla/core/indexer_cache.hpp's layout; ragged: k_scales[p]).
//
// Paged (decode, speculative steps): q [batch, next_n, heads, 128], row r = b * next_n + i;
// context_lens [batch] (int32), block_table [batch, max_blocks] (int32: logical block j of
// sequence b is cache block block_table[b, j]); the cache [num_blocks, block_size * 132] bytes.
// Position p of sequence b lives in block block_table[b, p / block_size] at offset
// p % block_size. Row i of next_n is the step's i-th query token, at position ctx - next_n + i,
// and sees positions 0 .. ctx - next_n + i (DeepGEMM's mask): the valid range of the row is
// [0, max(0, ctx - next_n + i + 1)). Output [rows, max_context].
// Ragged (prefill): q [rows, heads, 128], k_codes [num_keys, 128], k_scales [num_keys] float32,
// ks and ke [rows] (int32, DeepGEMM's cu_seqlen_ks / cu_seqlen_ke): the row's valid range is
// [ks, ke) (empty when ke <= ks). Output [rows, num_keys].
//
// Outside its row's valid range every logit is -inf (DeepGEMM's clean_logits=True: what the
// top-k reads as masked); inside it every logit is finite. The judge holds both exactly.
// Memory outside the valid blocks is never read: block-table entries past a sequence's last block
// and keys outside every row's range may hold anything.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/kernel.hpp"
#include "mla/core/presets.hpp"

namespace mla {

enum class IndexerLogitsLayout { paged, ragged };
const char* to_string(IndexerLogitsLayout l);  // "paged" | "ragged"
// Inverse of to_string; throws mla::Error naming an unknown word.
IndexerLogitsLayout indexer_logits_layout_from_string(std::string_view s);

struct IndexerLogitsShape {
  IndexerLogitsLayout layout = IndexerLogitsLayout::paged;
  int64_t batch = 0;   // paged: sequences; ragged: query rows
  int next_n = 1;      // paged: query tokens per sequence, 1 or 2; ragged: 1
  int64_t heads = 64;  // V3.2's index_n_heads
  // paged
  int64_t num_blocks = 0, block_size = 0, max_blocks = 0;
  int64_t max_context = 0;  // the logits' width: at least every context length
  // ragged
  int64_t num_keys = 0;
  int64_t rows() const { return layout == IndexerLogitsLayout::paged ? batch * next_n : batch; }
  int64_t cols() const { return layout == IndexerLogitsLayout::paged ? max_context : num_keys; }
};

// Every field of the shape, by name: the wire format's (a call in a child process). The inverse
// throws mla::Error naming a missing or malformed field.
nlohmann::json to_json(const IndexerLogitsShape& s);
IndexerLogitsShape indexer_logits_shape_from_json(const nlohmann::json& j);

struct IndexerLogitsInputs {
  IndexerLogitsShape shape;
  std::span<const uint8_t> q;        // [rows, heads, 128] e4m3 codes
  std::span<const float> weights;    // [rows, heads], q scales folded in
  // paged; empty for ragged
  std::span<const uint8_t> cache;          // [num_blocks, block_size * 132]
  std::span<const int32_t> context_lens;   // [batch]
  std::span<const int32_t> block_table;    // [batch, max_blocks]
  // ragged; empty for paged
  std::span<const uint8_t> k_codes;  // [num_keys, 128]
  std::span<const float> k_scales;   // [num_keys]
  std::span<const int32_t> ks, ke;   // [rows]
};
struct IndexerLogitsBuffers {
  IndexerLogitsShape shape;
  std::vector<uint8_t> q;
  std::vector<float> weights;
  std::vector<uint8_t> cache;
  std::vector<int32_t> context_lens, block_table;
  std::vector<uint8_t> k_codes;
  std::vector<float> k_scales;
  std::vector<int32_t> ks, ke;
  IndexerLogitsBuffers() = default;
  explicit IndexerLogitsBuffers(const IndexerLogitsInputs& in);
  IndexerLogitsInputs view() const;
};

// Lays out a paged call's keys: sequence b's logical blocks 0, 1, ... (as many as its context
// length needs) are the next entries of `pool`, written to its block-table row, and key(b, p,
// codes, scale) writes position p's 128 codes and its scale into its block's code and scale
// areas. b.shape, context_lens, the cache (num_blocks * block_size * 132 bytes) and the block
// table (batch * max_blocks entries) must be sized; the bytes and entries no sequence reads keep
// what the caller put there (garbage, for a kernel that reads past a context to show). Throws
// mla::Error when the pool holds too few blocks or one outside [0, num_blocks).
void place_paged_keys(IndexerLogitsBuffers& b, std::span<const int64_t> pool,
                      const std::function<void(int64_t seq, int64_t pos, uint8_t* codes, float& scale)>& key);

// The valid range [begin, end) of query row `row` (the header's rules); end >= begin.
struct IndexerRange {
  int64_t begin = 0, end = 0;
};
IndexerRange indexer_logits_range(const IndexerLogitsInputs& in, int64_t row);

// Where the key at position p of row `row` is: its 128 codes and its float32 scale (paged: through
// the block table into the block's code and scale areas; ragged: k_codes[p], k_scales[p]). The
// position must be inside the row's valid range of validated inputs.
struct IndexerKeyRef {
  const uint8_t* codes = nullptr;
  float scale = 0;
  int64_t slot = -1;  // paged: the cache slot, block * block_size + offset; ragged: -1
};
IndexerKeyRef indexer_logits_key(const IndexerLogitsInputs& in, int64_t row, int64_t p);

// The layout's fields consistent (the other layout's spans empty), batch >= 0, heads >= 1,
// paged next_n 1 or 2 (ragged 1), every span of its shape's size, context_lens in
// [0, max_context] and within max_blocks blocks, the block-table entries a sequence reads in
// [0, num_blocks), 0 <= ks <= num_keys and 0 <= ke <= num_keys, no e4m3 NaN code (0x7F, 0xFF)
// in q or in a key some row reads, finite weights, and every key scale read finite and > 0
// (an indexer cache scale is max(amax, 1e-4) / 448). Throws mla::Error naming the field and its
// position, prefixed with `who`.
void validate_indexer_logits_inputs(const IndexerLogitsInputs& in, std::string_view who = {});

// Memory-bound: bytes = the keys read once per sequence (paged: context_len * 132 per sequence
// and 4 per block-table entry used; ragged: 132 per key of the span the rows cover), q (1 byte a
// code), weights (4 per row and head), context_lens or ks/ke (4 each) and the whole logits
// tensor written (4 per element, -inf included); flops = per (row, valid position)
// 2 * heads * 128 for the dots plus 3 * heads (relu, the weight, the head sum) and 1 (k_scale).
CostModel indexer_logits_cost_model(const IndexerLogitsInputs& in);

struct IndexerLogitsKernelInfo {
  std::string name, backend, description;
  KernelRole role = KernelRole::optimized;
  std::vector<IndexerLogitsLayout> layouts;  // the variants it implements
  std::vector<int> next_ns;          // paged next_n it takes; empty: 1 and 2
  std::vector<int64_t> heads;        // empty: any
  std::vector<int64_t> block_sizes;  // paged; empty: any
  int64_t max_context = 0;           // the widest logits row it takes; 0: any
};

class PreparedIndexerLogits {
 public:
  virtual ~PreparedIndexerLogits() = default;
  virtual void run() = 0;                  // timed; repeatable
  virtual std::vector<float> results() = 0;  // [rows, cols] after the last run
  virtual void synchronize() {}
};

class IndexerLogitsImpl {
 public:
  virtual ~IndexerLogitsImpl() = default;
  virtual const IndexerLogitsKernelInfo& info() const = 0;
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Default: the layout, next_n, heads, block_size and width against its claims.
  virtual std::optional<std::string> check(const IndexerLogitsShape& s) const;
  virtual CostModel cost(const IndexerLogitsInputs& in) const { return indexer_logits_cost_model(in); }
  // Validates and copies.
  virtual std::unique_ptr<PreparedIndexerLogits> prepare(const IndexerLogitsInputs& in) const = 0;
};

}  // namespace mla
