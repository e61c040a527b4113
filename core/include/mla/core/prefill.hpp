// The prefill contract: MLA's prefill in the MHA form, as deployed prefill kernels take it
// (FlashAttention's varlen forward, FlashInfer's ragged prefill, FlashMLA's dense prefill; the
// way vLLM and SGLang run MLA prefill). The latent cache is decompressed per head before the
// call, so the kernel sees plain multi-head attention with a 192-wide q·k (nope 128 ‖ rope 64,
// the rope part the same k_pe for every head) and a 128-wide V. docs/field.md, "Prefill in the
// MHA form", gives the upstream semantics; the Python reference (mla_ref.prefill) derives these
// inputs from the layer, and mla::ref::prefill_attention is the fp64 oracle.
//
// Canonical (what the goldens, the oracles and the judge speak, fixtures/SCHEMA.md "Prefill
// cases"): a ragged batch packed along the token axis and cut by cu_seqlens_q / cu_seqlens_k
// ([batch + 1], starting at 0, non-decreasing); causal masking bottom-right aligned (query i of a
// sequence with s_q queries and s_k keys attends keys j <= s_k - s_q + i, so chunked prefill over
// a cached prefix is one call and s_q > s_k leaves the first rows empty); the non-causal call is
// the context-chunk call of chunked prefill (a chunk may hold no key); out [total_q, h, d_v];
// lse [h, total_q], natural log, +inf (out 0) for a row that attends nothing. A kernel declares
// what differs (PrefillConventions) and the host converts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/attention.hpp"
#include "mla/core/conventions.hpp"
#include "mla/core/kernel.hpp"

namespace mla {

// DeepSeek-V3's per-head widths in the MHA form: qk_nope_head_dim 128 + qk_rope_head_dim 64, and
// v_head_dim 128. A shape with other values is one every implementation refuses.
inline constexpr int kMhaNope = 128;
inline constexpr int kMhaRope = 64;
inline constexpr int kMhaDqk = kMhaNope + kMhaRope;  // 192
inline constexpr int kMhaDv = 128;

struct PrefillShape {
  int batch = 0;          // sequences
  int heads = 0;
  int64_t total_q = 0;    // query rows, all sequences
  int64_t total_k = 0;    // key rows, all sequences
  int d_qk = kMhaDqk;
  int d_v = kMhaDv;
  bool causal = true;     // bottom-right aligned; false: a context chunk (every key)
};

// out [total_q, h, d_v]; lse [h, total_q] (canonical).
std::vector<int64_t> out_shape(const PrefillShape& s);
std::vector<int64_t> lse_shape(const PrefillShape& s);

// Views into host memory owned by the caller.
struct PrefillInputs {
  PrefillShape shape;
  double softmax_scale = 0.0;                // 192^-0.5 · mscale² under the model's YaRN
  std::span<const uint16_t> q;               // [total_q, h, 192] bf16 bits
  std::span<const uint16_t> k;               // [total_k, h, 192] bf16 bits
  std::span<const uint16_t> v;               // [total_k, h, 128] bf16 bits
  std::span<const int32_t> cu_seqlens_q;     // [batch + 1]
  std::span<const int32_t> cu_seqlens_k;     // [batch + 1]
};

// Owned buffers in the layouts of PrefillInputs; view() lends them out (valid while the object
// lives, also after a move).
struct PrefillBuffers {
  PrefillShape shape;
  double softmax_scale = 0.0;
  std::vector<uint16_t> q, k, v;
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;

  PrefillBuffers() = default;
  explicit PrefillBuffers(const PrefillInputs& in);  // a private copy
  PrefillInputs view() const;
};

// Results widened to double for judging; `dtype` is what the implementation produced.
struct PrefillOutputs {
  OutDType dtype = OutDType::f64;
  std::vector<double> out;  // [total_q, h, d_v]
  std::vector<double> lse;  // [h, total_q], natural log, +inf for empty rows
};

// ---- conventions a prefill kernel declares ---------------------------------------------------

// How a causal kernel aligns its mask. FlashAttention before 2.1 aligned it top-left (query i
// attends keys j <= i); the two agree only where a sequence has as many queries as keys, so a
// top-left kernel is called on such causal sequences only (prefill_alignment_refusal) — no
// conversion of inputs or outputs can turn one mask into the other.
enum class CausalAlignment { bottom_right, top_left };
const char* to_string(CausalAlignment a);  // "bottom_right" | "top_left"
CausalAlignment causal_alignment_from_string(std::string_view s);

struct PrefillConventions {
  // lse base, layout and empty-row value, as for decode with b = 1 and s_q = total_q: layout
  // [b,h,s_q] is FA2/FA3's [h, total_q], [b,s_q,h] is FlashInfer's (and FlashMLA's view)
  // [total_q, h]; FA2 writes +inf for an empty row, FA3 -inf. Sparse indices do not apply.
  LseBase lse_base = LseBase::e;
  LseLayout lse_layout = LseLayout::b_h_sq;
  EmptyRowLse empty_row_lse = EmptyRowLse::pos_inf;
  // V handed over padded to d_qk (192, zeros after 128) and out written 192 wide, as kernels that
  // need equal q·k and V widths take it (vLLM pads V for FlashAttention builds without
  // d_v != d_qk support); the host pads the input and reads the first 128 of each row back.
  bool v_padded = false;
  CausalAlignment alignment = CausalAlignment::bottom_right;
  bool operator==(const PrefillConventions&) const = default;
  bool canonical() const { return *this == PrefillConventions{}; }
};
// {"lse_base", "lse_layout", "empty_row_lse", "v_padded", "causal_alignment"}, in the words of
// conventions.hpp; from_json throws mla::Error naming the field.
nlohmann::json to_json(const PrefillConventions& c);
PrefillConventions prefill_conventions_from_json(const nlohmann::json& j);

// Why a kernel with these conventions cannot be called on `in` at all (a top-left causal kernel
// on a sequence whose query and key counts differ), or nullopt.
std::optional<std::string> prefill_alignment_refusal(const PrefillConventions& c, const PrefillInputs& in);

// The width of V (and of out) as the kernel takes it: 192 when padded, else 128.
int kernel_v_width(const PrefillConventions& c, const PrefillShape& s);
// V [total_k, h, 128] padded with zeros to [total_k, h, 192] when the kernel declares v_padded;
// nullopt when it does not (the canonical V is passed as it is).
std::optional<std::vector<uint16_t>> v_to_kernel(const PrefillConventions& c, const PrefillInputs& in);
// The canonical inputs as a kernel with conventions `c` takes them: the one boundary every host
// (the certifier, the tests) crosses. V is padded into `v_storage` when the kernel declares
// v_padded (the returned view then points into it, so it must outlive the call), and d_v follows.
PrefillInputs inputs_to_kernel(const PrefillConventions& c, const PrefillInputs& in,
                               std::vector<uint16_t>& v_storage);

// The kernel's outputs made canonical in place: out cut from [total_q, h, 192] to 128 per row
// when padded; lse re-laid out to [h, total_q], base 2 times ln 2, the infinities exchanged for
// a kernel that writes -inf for an empty row (so one writing +inf where it declared -inf is not
// accepted). Buffers of the wrong size are left as they are, for the judge to report.
void outputs_to_canonical(const PrefillConventions& c, const PrefillShape& s, PrefillOutputs& o);

// ---- well-formed inputs ----------------------------------------------------------------------

// Query and key rows of sequence i: cu_seqlens_q[i+1] - cu_seqlens_q[i], the same for k.
struct PrefillSequence {
  int64_t q_begin = 0, s_q = 0, k_begin = 0, s_k = 0;
};
// The sequences of well-formed inputs (validate_prefill_inputs first).
std::vector<PrefillSequence> prefill_sequences(const PrefillInputs& in);

// The keys query row `i` (0-based within its sequence) attends: [0, last] with last =
// s_k - s_q + i under the causal mask (clamped to s_k - 1), s_k - 1 without; -1: none.
int64_t prefill_last_key(bool causal, const PrefillSequence& seq, int64_t i);

// The one definition of well-formed prefill inputs, checked before any implementation touches
// them: d_qk 192 and d_v 128 (else mla::UnsupportedError); batch and heads >= 1, total_q and
// total_k >= 0; a finite positive softmax scale; cu_seqlens of batch + 1 entries, starting at 0,
// non-decreasing, ending at total_q / total_k; every span the size its shape needs. Throws
// mla::Error naming the field and the values, prefixed with `who` when given.
void validate_prefill_inputs(const PrefillInputs& in, std::string_view who = {});

// ---- cost ------------------------------------------------------------------------------------

// Attended (query, key) pairs, mask-aware: a causal sequence with s_q <= s_k attends
// s_q·(s_k - s_q) + s_q·(s_q + 1)/2 pairs (about half of s_q·s_k when s_q == s_k: the "causal
// halving" of prefill FLOP counts), each row exactly as prefill_last_key says.
int64_t prefill_attended_pairs(const PrefillInputs& in);

// The MHA-form prefill byte and FLOP model: FLOPs 2·pairs·h·(d_qk + d_v) (Q·Kᵀ and P·V; the
// softmax's exponentials are not counted, as the peers' benchmarks do not); bytes q, k and v
// read once in bf16, out written in `out_dtype`, lse in float32.
CostModel prefill_cost_model(const PrefillInputs& in, OutDType out_dtype = OutDType::bf16);

// {"batch", "heads", "total_q", "total_k", "causal"} (+ "d_qk"/"d_v" when not 192/128); the
// certificate's and the wire format's shape. Inverse throws mla::Error naming the field.
nlohmann::json to_json(const PrefillShape& s);
PrefillShape prefill_shape_from_json(const nlohmann::json& j);

}  // namespace mla
