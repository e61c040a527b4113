// The attention-core interface every implementation (CPU or CUDA, ours or a plug-in) fits.
//
// Why this shape: it is the interface real decode kernels expose (FlashMLA's convention) — a
// bf16 absorbed query, a paged latent cache in one of two byte formats, a block table and
// per-sequence lengths — so a kernel is certified exactly as it is called in production.
// Inputs are host byte buffers in the golden layouts (fixtures/SCHEMA.md); an implementation
// that runs elsewhere copies them in `prepare`, which is never timed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mla {

enum class CacheFormat { bf16, fp8 };  // 1152 or 656 bytes per token
enum class OutDType { f64, f32, bf16 };

const char* to_string(CacheFormat f);
const char* to_string(OutDType d);
std::size_t cache_bytes_per_token(CacheFormat f);  // 576*2 or 656

struct AttnShape {
  int batch = 0;
  int s_q = 0;
  int heads = 0;
  int d_qk = 576;
  int d_v = 512;
  int page_size = 0;
  int num_blocks = 0;
  int max_blocks = 0;
  int topk = 0;  // 0: dense
  CacheFormat cache_format = CacheFormat::bf16;
  bool causal = true;
};

// Views into host memory owned by the caller, laid out as in fixtures/SCHEMA.md.
struct AttnInputs {
  AttnShape shape;
  double softmax_scale = 0.0;
  std::span<const uint16_t> q;              // [b, s_q, h, 576] bf16 bits
  std::span<const uint8_t> kv_cache;        // [nb, ps, bytes_per_token]
  std::span<const int32_t> block_table;     // [b, mb]
  std::span<const int32_t> cache_seqlens;   // [b]
  std::span<const int32_t> indices;         // [b, s_q, topk] when topk > 0, else empty
};

// Owned buffers in the layouts of AttnInputs, for whoever builds inputs (synthetic points, cases
// read back by the certifier's child process, test layouts). view() lends them out; the views stay
// valid while the object lives, also after a move (vectors keep their storage on move).
struct AttnBuffers {
  AttnShape shape;
  double softmax_scale = 0.0;
  std::vector<uint16_t> q;              // [b, s_q, h, 576] bf16 bits
  std::vector<uint8_t> kv_cache;        // [nb, ps, bytes per token]
  std::vector<int32_t> block_table;     // [b, mb]
  std::vector<int32_t> cache_seqlens;   // [b]
  std::vector<int32_t> indices;         // [b, s_q, topk] when sparse
  // Inline: header-only users (the reference's test support) do not link the kernels library.
  AttnInputs view() const {
    AttnInputs in;
    in.shape = shape;
    in.softmax_scale = softmax_scale;
    in.q = q;
    in.kv_cache = kv_cache;
    in.block_table = block_table;
    in.cache_seqlens = cache_seqlens;
    in.indices = indices;
    return in;
  }
};

// Results widened to double for judging; `dtype` says what the implementation really produced
// (a bf16 kernel's values are exact bf16 values), so the tolerance table is chosen by it.
struct AttnOutputs {
  OutDType dtype = OutDType::f64;
  std::vector<double> out;  // [b, s_q, h, 512]
  std::vector<double> lse;  // [b, h, s_q], natural log, +inf for empty rows
};

// What an implementation claims to support. Anything outside is refused with a reason by
// `AttentionImpl::check`, never silently routed elsewhere.
struct Capabilities {
  std::vector<CacheFormat> cache_formats;
  int min_heads = 1, max_heads = 128;
  int min_s_q = 1, max_s_q = 64;
  std::vector<int> page_sizes;  // empty: any page size
  bool dense = true;
  bool sparse = false;
  bool varlen = true;
};

// Byte and FLOP model of one call, used by benchmarks and reports.
struct CostModel {
  double bytes = 0;  // q + cache bytes actually read + out + lse
  double flops = 0;  // 2 * attended (query, key) pairs * h * (576 + 512)
};

class PreparedAttention {
 public:
  virtual ~PreparedAttention() = default;
  // The timed part: compute from the prepared inputs. Must be repeatable with identical results.
  virtual void run() = 0;
  // Copies the results of the last run back (untimed).
  virtual AttnOutputs results() = 0;
  // Blocks until the work issued by run() has finished (CPU: no-op).
  virtual void synchronize() {}
};

struct KernelInfo {
  std::string name;         // unique, [a-z0-9_]+
  std::string backend;      // "cpu" or "cuda"
  std::string description;  // one line
  OutDType out_dtype = OutDType::f64;
  Capabilities caps;
};

class AttentionImpl {
 public:
  virtual ~AttentionImpl() = default;
  virtual const KernelInfo& info() const = 0;
  // Why it cannot run on this machine at all (no GPU, ...), or nullopt.
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Why it cannot run this shape, or nullopt. Default: checks `info().caps`.
  virtual std::optional<std::string> check(const AttnShape& shape) const;
  // The bytes/FLOPs this call moves; default is the MLA model (latent cache read once).
  virtual CostModel cost(const AttnInputs& in) const;
  // Validates and copies inputs; throws mla::Error on a shape it does not support.
  virtual std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const = 0;
};

// Capability check shared by the default `check` and by callers that want the reason.
std::optional<std::string> check_capabilities(const Capabilities& caps, const AttnShape& shape);
// The MLA byte/FLOP model (fixtures/SCHEMA.md; FIELD-NOTES byte counts), with bf16 outputs
// (what deployed kernels write).
CostModel mla_cost_model(const AttnInputs& in);
// The same with outputs of `out_dtype` (AttentionImpl::cost uses the implementation's own).
CostModel mla_cost_model(const AttnInputs& in, OutDType out_dtype);

// Bytes of one output value: 8, 4 or 2.
std::size_t out_bytes_per_value(OutDType d);

// What a call must touch, the basis of both models. tokens: cache tokens read (dense: the
// tokens some query attends; sparse: the distinct valid indices of each sequence); pairs:
// attended (query, key) pairs, causal-aware. Throws mla::Error when the spans are too short.
struct AttnTraffic {
  int64_t tokens = 0;
  int64_t pairs = 0;
  std::vector<int64_t> per_sequence_tokens;
};
AttnTraffic attention_traffic(const AttnInputs& in);

}  // namespace mla
