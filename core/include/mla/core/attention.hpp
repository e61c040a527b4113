// The attention-core contract: the vocabulary every part of the suite speaks (the goldens'
// loader, the oracles, the kernels, plug-ins, the judge, the certifier), and the operations on
// it that must mean the same thing everywhere: the formats' names, the output shapes, what a
// well-formed input is, which keys a query attends, and how a shape is written down.
//
// Why this shape: it is the interface real decode kernels expose (FlashMLA's convention) — a
// bf16 absorbed query, a paged latent cache in one of two byte formats, a block table and
// per-sequence lengths — so a kernel is certified exactly as it is called in production.
// Inputs are host byte buffers in the golden layouts (fixtures/SCHEMA.md); an implementation
// that runs elsewhere copies them in `prepare`, which is never timed.
//
// It lives in mla_core, the lowest library, so nothing that speaks it needs anything above.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/numeric.hpp"

namespace mla {

enum class CacheFormat { bf16, fp8 };  // 1152 or 656 bytes per token
enum class OutDType { f64, f32, bf16 };

// "bf16" / "fp8" and "f64" / "f32" / "bf16": the words of the schema, the certificate, the
// child wire format and the plug-in descriptor. The parsers throw mla::Error naming the word
// and the accepted ones.
const char* to_string(CacheFormat f);
const char* to_string(OutDType d);
CacheFormat cache_format_from_string(std::string_view s);
OutDType out_dtype_from_string(std::string_view s);

std::size_t cache_bytes_per_token(CacheFormat f);  // 576*2 or 656
std::size_t out_bytes_per_value(OutDType d);       // 8, 4 or 2

// The head dimensions of MLA's absorbed attention: q·k over 576 (latent 512 + rope 64), P·V over
// the 512 latent dimensions. A shape with other values is one every implementation refuses.
inline constexpr int kMlaDqk = 576;
inline constexpr int kMlaDv = 512;

struct AttnShape {
  int batch = 0;
  int s_q = 0;
  int heads = 0;
  int d_qk = kMlaDqk;
  int d_v = kMlaDv;
  int page_size = 0;
  int num_blocks = 0;
  int max_blocks = 0;
  int topk = 0;  // 0: dense
  CacheFormat cache_format = CacheFormat::bf16;
  bool causal = true;
};

// The result extents: out [b, s_q, h, d_v], lse [b, h, s_q].
std::vector<int64_t> out_shape(const AttnShape& s);
std::vector<int64_t> lse_shape(const AttnShape& s);

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

// Owned buffers in the layouts of AttnInputs, for whoever builds inputs (synthetic points, golden
// cases, cases read back by the certifier's child process, test layouts, a kernel's private copy
// in prepare()). view() lends them out; the views stay valid while the object lives, also after
// a move (vectors keep their storage on move).
struct AttnBuffers {
  AttnShape shape;
  double softmax_scale = 0.0;
  std::vector<uint16_t> q;              // [b, s_q, h, 576] bf16 bits
  std::vector<uint8_t> kv_cache;        // [nb, ps, bytes per token]
  std::vector<int32_t> block_table;     // [b, mb]
  std::vector<int32_t> cache_seqlens;   // [b]
  std::vector<int32_t> indices;         // [b, s_q, topk] when sparse

  AttnBuffers() = default;
  // A private copy of `in`: a prepared call must not depend on the caller's buffers staying
  // alive or unchanged between prepare() and run().
  explicit AttnBuffers(const AttnInputs& in);
  AttnInputs view() const;
};

// Results widened to double for judging; `dtype` says what the implementation really produced
// (a bf16 kernel's values are exact bf16 values), so the tolerance table is chosen by it.
struct AttnOutputs {
  OutDType dtype = OutDType::f64;
  std::vector<double> out;  // [b, s_q, h, 512]
  std::vector<double> lse;  // [b, h, s_q], natural log, +inf for empty rows
};

// ---- which keys a query attends --------------------------------------------------------------

// Dense: the last position query `s` (of s_q) may attend, or -1 when none:
// causal: L - s_q + s (clamped to L-1); non-causal: L-1 (docs/field.md, "The peers'
// conventions": every peer aligns the causal rows so).
int64_t dense_last_position(const AttnShape& shape, int64_t L, int64_t s);

// The valid indices of sparse row (b, s), ascending: 0 <= idx < cache_seqlens[b]; the invalid
// ones (negative, >= L) are skipped, never clamped (docs/field.md, "Bugs", 8). Throws mla::Error
// when a valid position appears twice (it would be attended twice, which no reference does).
std::vector<int64_t> sparse_row_positions(const AttnInputs& in, int64_t b, int64_t s);

// ---- well-formed inputs ------------------------------------------------------------------------

// What is wrong with the paging of a case, in parts a caller words its own way (the loader as a
// FixtureError on the dataset, the validator as one message).
struct InputProblem {
  std::string field;     // "cache_seqlens", "block_table"
  std::string found;     // "cache_seqlens[1] = 65"
  std::string expected;  // "[0, max_blocks·page_size = 64]"
  std::string detail;    // more context, may be empty
  std::string message() const;  // "cache_seqlens[1] = 65 outside [0, ...]<detail>"
};

// 0 <= cache_seqlens[i] <= max_blocks·page_size, and every block-table entry a sequence uses
// (j < ceil(L/page_size)) inside [0, num_blocks); entries past ceil(L/ps) are data (the sentinel
// that catches over-reads) and are not looked at. The spans must have their shape's sizes.
std::optional<InputProblem> paging_problem(const AttnShape& s, std::span<const int32_t> block_table,
                                           std::span<const int32_t> cache_seqlens);

// The one definition of a well-formed input, checked before any implementation (host, device or
// plug-in) touches the buffers: d_qk 576 and d_v 512 (else mla::UnsupportedError), positive
// batch, s_q, heads and page_size, non-negative num_blocks, max_blocks and topk, a known cache
// format, a finite softmax scale, every span the size its shape needs (the cache in bytes of its
// format; no indices for dense), the paging above, and distinct valid indices in every sparse
// row. Throws mla::Error naming the field and the values, prefixed with `who` when given.
void validate_attention_inputs(const AttnInputs& in, std::string_view who = {});

// ---- how a shape is written down ---------------------------------------------------------------

// {"batch", "s_q", "heads", "page_size", "num_blocks", "max_blocks", "topk", "causal",
// "cache_format"}; "d_qk" and "d_v" only when they are not MLA's 576/512 (every golden case has
// those, and a shape that differs is one to refuse, so it says so). The certificate, the child
// wire format and the tools write shapes this way.
nlohmann::json to_json(const AttnShape& s);
// Inverse of to_json; throws mla::Error naming the missing or malformed field.
AttnShape attn_shape_from_json(const nlohmann::json& j);

// The case attributes that hold a shape (fixtures/SCHEMA.md, attention cases), read through
// whatever reads attributes (the HDF5 loader, the certifier's quick header read), so the names,
// the ranges and the format words are written down once. Implementations throw their own
// typed error (mla::FixtureError) naming the file and the attribute.
class ShapeAttributes {
 public:
  virtual ~ShapeAttributes() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual int64_t integer(const std::string& name, int64_t lo, int64_t hi) const = 0;
  virtual std::string string(const std::string& name) const = 0;
  // Refuses the value of attribute `name`: never returns.
  [[noreturn]] virtual void refuse(const std::string& name, const std::string& expected,
                                   const std::string& found) const = 0;
};
// batch, s_q, heads in [1, 2^31); d_qk 576 and d_v 512; page_size, num_blocks, max_blocks in
// [1, 2^31); topk >= 0; causal 0/1; cache_format "bf16" or "fp8".
AttnShape attn_shape_from_attributes(const ShapeAttributes& a);
// An FP8 case's "scale_fmt" ("fp32" or "ue8m0"); call it for fp8 shapes only.
ScaleFmt fp8_scale_fmt_from_attributes(const ShapeAttributes& a);
// An FP8 case's "fp8_recipe" ("deepseek_v32" or "flashmla"); absent (every schema-version-1
// file) it is DeepSeek's, the only recipe those files were written with. FP8 shapes only.
Fp8Recipe fp8_recipe_from_attributes(const ShapeAttributes& a);

}  // namespace mla
