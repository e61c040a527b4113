// The indexer append contract: DeepSeek-V3.2's lightning-indexer keys written into their paged
// 132-byte FP8 cache, the call vLLM's indexer_k_quant_and_cache makes and DeepGEMM's paged
// logits read (the byte count is presets.hpp's kIndexerTokenBytes).
//
// Inputs: bf16 keys [num_tokens, 128], already LayerNorm'd, RoPE'd and Hadamard-rotated upstream
// (the append only quantizes and stores), int64 slot_mapping [num_tokens] (slot = block *
// block_size + offset; a slot < 0 skips its token: nothing is written for it), and the paged
// cache [num_blocks, block_size * 132] bytes, whose prior contents every byte the call does not
// own must keep.
//
// Layout (DeepGEMM's and vLLM's, not the MLA FP8 token's): WITHIN EACH BLOCK all block_size
// tokens' 128 e4m3 codes first (block_size * 128 bytes), THEN all their float32 scales
// (block_size * 4 bytes, little-endian). A token's scale is NOT after its codes.
//
// Quantization: one block of 128 per token. amax = max|k| over the bf16 values, the float32
// scale by the declared recipe, code = e4m3(float32(k / scale)) rounded to nearest even and
// saturated to +-448 (mla/core/numeric.hpp's encoder). The recipe is the call's ScaleFmt plus the
// kernel's declared float32 operation (IndexerScaleOp):
//   fp32   s = max(amax, 1e-4) / 448                       (divide: vLLM's indexer write)
//          s = max(amax, 1e-4) * float32(1/448)            (times_reciprocal: DeepSeek V3.2's
//                                                           act_quant, the Python reference)
//   ue8m0  the smallest power of two >= that s (both operations give the same one).
// The clamp is applied to amax before dividing (DeepSeek's order, also vLLM's indexer kernel):
// an all-zero key gets 1e-4/448 (ue8m0: 2^-22), not the MLA writer's max(amax/448, 1e-4).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/core/kernel.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/presets.hpp"

namespace mla {

// How a float32 scale divides amax by 448 (the header's recipes).
enum class IndexerScaleOp { divide, times_reciprocal };
const char* to_string(IndexerScaleOp op);                       // "divide" | "times_reciprocal"
IndexerScaleOp indexer_scale_op_from_string(std::string_view s);  // throws mla::Error naming the known ones

// The float32 scale of a key whose largest |value| is `amax` (rounded to float32 first), by the
// recipe (fmt, op); +inf for an infinite amax, NaN for a NaN one.
float indexer_key_scale(double amax, ScaleFmt fmt, IndexerScaleOp op);
// The recipe as messages name it: "max(amax, 1e-4) / 448 rounded up to a power of two".
std::string indexer_recipe_formula(ScaleFmt fmt, IndexerScaleOp op);

// The keys every quantizer of this recipe must get right, one 128-value key each, in this order:
// all zero (the 1e-4 clamp); bf16's largest finite values (+-3.39e38, -1e37) among O(1) ones,
// whose codes underflow to 0; an amax whose float32 quotient amax / float32(amax / 448) is past
// 448 (searched, not assumed: the encoder must saturate it to 448, not to NaN) among values in
// [-1, 1]; values under the clamp (|k| <= 6e-5); a negative zero among O(1) values. Tests and the
// certifier's drawn appends put them among random keys.
std::vector<std::vector<uint16_t>> indexer_edge_keys();

struct IndexerAppendShape {
  int64_t num_tokens = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 0;  // tokens per cache block
  ScaleFmt scale_fmt = ScaleFmt::ue8m0;
};

// Byte offsets into the cache of a slot's first code and of its scale (the header's layout).
int64_t indexer_code_offset(int64_t block_size, int64_t slot);
int64_t indexer_scale_offset(int64_t block_size, int64_t slot);
int64_t indexer_cache_bytes(const IndexerAppendShape& s);  // num_blocks * block_size * 132
// Which slot a cache byte belongs to and whether it is one of its codes (the code's dimension in
// `dim`) or of its scale (the byte within the scale in `dim`).
struct IndexerByte {
  int64_t slot = 0;
  bool scale = false;
  int64_t dim = 0;
};
IndexerByte indexer_byte_at(int64_t block_size, int64_t offset);

struct IndexerAppendInputs {
  IndexerAppendShape shape;
  std::span<const uint16_t> keys;          // [num_tokens, 128] bf16 bits
  std::span<const int64_t> slot_mapping;   // [num_tokens]
  std::span<const uint8_t> cache;          // the cache before the call
};
struct IndexerAppendBuffers {
  IndexerAppendShape shape;
  std::vector<uint16_t> keys;
  std::vector<int64_t> slot_mapping;
  std::vector<uint8_t> cache;
  IndexerAppendBuffers() = default;
  explicit IndexerAppendBuffers(const IndexerAppendInputs& in);
  IndexerAppendInputs view() const;
};

// block_size >= 1, num_blocks and num_tokens >= 0, a known scale_fmt, keys / slot_mapping /
// cache of the shape's sizes, every slot < num_blocks * block_size, no two tokens on one slot,
// and every key a token writes finite (a non-finite key has no finite scale; upstream's
// quantizer refuses it). Throws mla::Error naming the field (and the token), prefixed with `who`.
void validate_indexer_append_inputs(const IndexerAppendInputs& in, std::string_view who = {});

// Memory-bound: the keys read (2 bytes a value), slot_mapping (8 bytes a token), 132 bytes
// written per token that has a slot; FLOPs 3 per value written (|k| and max, one division).
CostModel indexer_append_cost_model(const IndexerAppendInputs& in);

struct IndexerAppendConventions {
  IndexerScaleOp fp32_scale_op = IndexerScaleOp::divide;
  bool operator==(const IndexerAppendConventions&) const = default;
};

struct IndexerAppendKernelInfo {
  std::string name, backend, description;
  KernelRole role = KernelRole::optimized;
  std::vector<ScaleFmt> scale_fmts;   // the recipes it writes
  std::vector<int64_t> block_sizes;   // empty: any
  IndexerAppendConventions conventions;
};

class PreparedIndexerAppend {
 public:
  virtual ~PreparedIndexerAppend() = default;
  // Timed; repeatable: the same keys written to the same slots leave the same bytes.
  virtual void run() = 0;
  virtual std::vector<uint8_t> results() = 0;  // the whole cache after the last run
  virtual void synchronize() {}
};

class IndexerAppendImpl {
 public:
  virtual ~IndexerAppendImpl() = default;
  virtual const IndexerAppendKernelInfo& info() const = 0;
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Default: the scale_fmt and block_size against its claims.
  virtual std::optional<std::string> check(const IndexerAppendShape& s) const;
  virtual CostModel cost(const IndexerAppendInputs& in) const { return indexer_append_cost_model(in); }
  // Validates and copies (the cache included: the call writes into its own copy).
  virtual std::unique_ptr<PreparedIndexerAppend> prepare(const IndexerAppendInputs& in) const = 0;
};

}  // namespace mla
