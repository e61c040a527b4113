// The benchmark and test axes of the attention core, declared once as data.
//
// Why one table: benchmarks, the certifier and stress tests must talk about the same shapes
// (FlashMLA's memory-bound decode b=128 s_q=1 h=16, its compute-bound h=64/128 points, V3.2's
// top-k 2048 over an FP8 cache, the edges real users crashed on), and a shape that lives in one
// place cannot drift between them. Every point carries its own explicit seed, so the synthetic
// inputs it builds are the same bytes on every machine and in every language that implements
// the `splitmix64-uniform-v1` generator (fixtures/SCHEMA.md).
//
// Full-size points (tier `gpu`) are the shapes the deployed kernels are measured on. The fp64
// CPU reference cannot run them in a CI budget (b=128, s_k=64K is 9.7 GB of cache and 2.9e11
// FLOP), so the CPU tiers hold separate points with the batch (and, where needed, the context)
// reduced; each such point names what it was reduced from in `scaled_from`, and reports carry
// that text so a CPU number is never mistaken for the production shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/core/attention.hpp"

namespace mla::axes {

// What regime or hazard a point exercises.
enum class Axis { decode_memory, decode_compute, long_context, varlen, sparse, fp8, edge };
const char* to_string(Axis a);

// Which runs include a point (bit mask). `cpu_quick` is the subset a 2-core CI machine runs for
// a full report in a few minutes; `cpu_full` adds the long and large CPU points.
enum Tier : unsigned { cpu_quick = 1u, cpu_full = 2u, gpu = 4u };
// The tier sets the axis tables use: the quick run is a subset of the full one.
inline constexpr unsigned kQuick = cpu_quick | cpu_full;
inline constexpr unsigned kFull = cpu_full;
inline constexpr unsigned kGpu = gpu;
// Parses "cpu_quick", "cpu_full" or "gpu"; throws mla::Error otherwise.
Tier tier_from_string(std::string_view s);
const char* to_string(Tier t);

// Generator streams used by `build_inputs` for one point's seed (fixed, so any implementation
// of the generator rebuilds the same inputs).
inline constexpr uint64_t kStreamQ = 0;         // q, [b, s_q, h, 576] bf16, flat C index
inline constexpr uint64_t kStreamKv = 1;        // cache values, [nb, ps, 576] bf16, physical flat index
inline constexpr uint64_t kStreamBlocks = 2;    // permutation of the physical blocks
inline constexpr uint64_t kStreamLengths = 3;   // varlen sequence lengths (drawn when the table is built)
inline constexpr uint64_t kStreamIndices = 4;   // sparse top-k rows

// The sentinel for unused block-table entries (fixtures/SCHEMA.md `sentinel_block_id`).
inline constexpr int32_t kSentinelBlock = 2147483647;

// The kinds of invalid sparse index the catalog's sparse cases hold (the Python reference's
// make_indices): negatives (-1, -2, -7, INT_MIN), the length L itself, L + 5 and INT_MAX. An
// entry of kind `k` of a row of sequence length L is invalid_index(k, L).
inline constexpr int kInvalidKinds = 7;
int32_t invalid_index(int kind, int32_t length);
// Page size of every point that does not test paging itself (FlashMLA's only page size).
inline constexpr int kDefaultPageSize = 64;

struct AxisPoint {
  std::string name;  // unique, [a-z0-9_]+
  Axis axis = Axis::decode_memory;
  std::string why;          // one line: what the point is for
  std::string scaled_from;  // empty for production shapes; else what was reduced and why
  unsigned tiers = 0;       // Tier bits
  // batch, s_q, heads, page_size, topk, cache_format, causal are declared; num_blocks and
  // max_blocks are derived from `seqlens` when the table is built.
  AttnShape shape;
  std::vector<int32_t> seqlens;  // [batch], tokens in each sequence's cache
  ScaleFmt scale_fmt = ScaleFmt::fp32;  // fp8 only
  double q_std = 1.0;   // generator std of q (mean 0); large values stress the LSE
  double kv_std = 1.0;  // generator std of the cache values (mean 0)
  // Sparse only: entries per row that must be skipped, mixed among the valid ones; rows also end
  // in invalid entries when seqlen < topk. They cycle through the catalog's kinds of invalid
  // index (kInvalidKinds), so a row with 7 or more of them holds every kind.
  int invalid_per_row = 0;
  // bf16 cache only: plant the needles of rule needles-v1 (mla/core/needles.hpp) over q and the
  // cache, as the catalog's long cases carry them (fixtures/SCHEMA.md "Needles").
  bool needles = false;
  uint64_t seed = 0;

  bool in(Tier t) const { return (tiers & t) != 0; }
  // Sum of seqlens.
  int64_t total_tokens() const;
};

// Recomputes the derived paging fields (num_blocks = pages of all sequences + 1 spare,
// max_blocks = max(1, most pages of one sequence), page_size defaulted to kDefaultPageSize) and
// checks the declaration; the table applies it to every row, call it after editing a copy.
// Throws mla::Error on an inconsistent point.
void derive_paging(AxisPoint& p);

// The whole table, in a fixed order (names unique).
const std::vector<AxisPoint>& catalog();
// Points in tier `t`, in table order.
std::vector<const AxisPoint*> select(Tier t);
// nullptr when absent.
const AxisPoint* find(std::string_view name);

// DeepSeek-V3/V3.1 softmax scale (qk head dim 192, YaRN mscale² with mscale 1, factor 40):
// mla::softmax_scale of the v3 preset, never written down: every point uses it.
double deepseek_v3_softmax_scale();

// Host bytes `build_inputs` allocates for a point (so callers can refuse a point that does not
// fit before allocating it). The FP8 build also needs `bf16_staging` bytes transiently.
struct Footprint {
  std::size_t q = 0, kv_cache = 0, block_table = 0, seqlens = 0, indices = 0, bf16_staging = 0;
  std::size_t total() const { return q + kv_cache + block_table + seqlens + indices; }
  std::size_t peak() const { return total() + bf16_staging; }
};
Footprint footprint(const AxisPoint& p);

// Owning synthetic inputs of one point. Movable (the views stay valid: vectors keep their
// storage on move), not copyable (a copy would be a silent multi-GB allocation).
class SyntheticInputs : public AttnBuffers {
 public:
  SyntheticInputs() = default;
  SyntheticInputs(SyntheticInputs&&) = default;
  SyntheticInputs& operator=(SyntheticInputs&&) = default;
  SyntheticInputs(const SyntheticInputs&) = delete;
  SyntheticInputs& operator=(const SyntheticInputs&) = delete;
};

// Builds the inputs of a point with the counter-based generator:
//  * q = bf16(value(seed, kStreamQ, i, 0, q_std));
//  * the cache is generated as one [nb, ps, 576] bf16 tensor from kStreamKv (physical order,
//    as a `generated/kv_cache` tensor of the schema), then every slot no sequence uses is
//    poisoned with NaN; an FP8 point quantizes each used token of that bf16 cache with
//    `fp8_quantize_token` (the deployed bf16 -> fp8 path) and poisons unused slots with the
//    schema's NaN pattern;
//  * physical blocks are the first `used` entries of permutation(seed, kStreamBlocks, nb), with
//    nb = used + 1 so one whole poisoned block exists even when every sequence is empty;
//  * block-table entries past a sequence's last page hold kSentinelBlock;
//  * sparse rows hold min(seqlen, topk - invalid_per_row) distinct valid positions (Floyd's
//    sampling on kStreamIndices), the rest invalid (invalid_index of kinds 0, 1, 2, ... in turn),
//    in a generator-shuffled order;
//  * a point with `needles` then gets the needles-v1 overlay (bf16 cache only; mla::Error when
//    the rule cannot place them at the point's head count and page size).
// Throws mla::Error on an inconsistent point (e.g. seqlens.size() != batch).
SyntheticInputs build_inputs(const AxisPoint& p);

}  // namespace mla::axes
