// The conventions an implementation declares for what crosses its boundary, and the pure
// functions that translate between them and the suite's canonical ones. The peers differ
// (docs/field.md, "The peers' conventions"): FlashInfer returns lse in base 2, shaped
// [b, s_q, h], with -inf for a row that attends nothing; FlashMLA, FlashInfer and vLLM take
// sparse indices as global cache slots (block · page_size + offset) with -1 the only invalid
// marker. Instead of every adapter converting by hand (and a forgotten conversion reading
// poisoned slots), the kernel declares its conventions and the host converts:
//   inputs   canonical -> the kernel's, before the call   (inputs_to_kernel)
//   outputs  the kernel's -> canonical, before judging     (outputs_to_canonical)
// Every function here is pure (no state, no I/O), so a conversion is testable on its own and
// the same wherever the host calls it.
//
// Canonical (what the goldens, the oracles and the judge speak, fixtures/SCHEMA.md): lse natural
// log, [b, h, s_q], +inf for an empty row; sparse indices are positions within the sequence,
// valid when 0 <= idx < cache_seqlens[b], every other value invalid (-1, other negatives, L or
// more, INT_MAX — the goldens use them all).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/attention.hpp"

namespace mla {

enum class LseBase { e, two };                 // natural log | log2
enum class LseLayout { b_h_sq, b_sq_h };       // [b, h, s_q] | [b, s_q, h]
enum class EmptyRowLse { pos_inf, neg_inf };   // the lse of a row that attends nothing
enum class IndexNumbering { positions, global_slots };

struct Conventions {
  LseBase lse_base = LseBase::e;
  LseLayout lse_layout = LseLayout::b_h_sq;
  EmptyRowLse empty_row_lse = EmptyRowLse::pos_inf;
  IndexNumbering indices = IndexNumbering::positions;
  bool operator==(const Conventions&) const = default;
  bool canonical() const { return *this == Conventions{}; }
};

// The words of the certificate, the child wire format and the conventions table of
// kernels/plugin/README.md: lse base "e" | "2", layout "[b,h,s_q]" | "[b,s_q,h]", empty row "+inf" | "-inf", indices
// "positions" | "global_slots". The parsers throw mla::Error naming the word and the known ones.
const char* to_string(LseBase b);
const char* to_string(LseLayout l);
const char* to_string(EmptyRowLse e);
const char* to_string(IndexNumbering n);
LseBase lse_base_from_string(std::string_view s);
LseLayout lse_layout_from_string(std::string_view s);
EmptyRowLse empty_row_lse_from_string(std::string_view s);
IndexNumbering index_numbering_from_string(std::string_view s);
// {"lse_base", "lse_layout", "empty_row_lse", "indices"}; from_json throws mla::Error.
nlohmann::json to_json(const Conventions& c);
Conventions conventions_from_json(const nlohmann::json& j);

// ---- inputs: canonical -> the kernel's ----------------------------------------------------------

// The sparse indices [b, s_q, topk] numbered as `n` says. positions: a copy. global_slots: a
// valid position p of sequence b becomes block_table[b][p / page_size] * page_size +
// p % page_size, and EVERY invalid index (whatever its value) becomes -1, the one invalid marker
// of that convention. Dense inputs (topk == 0) have no indices: empty. Throws mla::Error when the
// spans do not have the shape's sizes (the caller validated the inputs first).
std::vector<int32_t> indices_to_kernel(IndexNumbering n, const AttnInputs& canonical);
// The inverse, for reading a kernel's indices back (and the round-trip tests): a global slot that
// holds position p < L of sequence b becomes p; -1 and every slot the sequence does not hold
// below L becomes -1. positions: a copy.
std::vector<int32_t> indices_to_canonical(IndexNumbering n, const AttnInputs& kernel_view);

// The inputs as the kernel takes them, or nullopt when its convention is the canonical one (the
// caller then passes the canonical inputs themselves: nothing is copied).
std::optional<AttnBuffers> inputs_to_kernel(const Conventions& c, const AttnInputs& canonical);

// ---- outputs: the kernel's -> canonical ---------------------------------------------------------

// lse [b·h·s_q values] from the kernel's convention to canonical: re-laid out to [b, h, s_q],
// base 2 multiplied by ln 2, and for an empty-row lse of -inf the two infinities exchanged (so
// the declared empty value becomes +inf and the other infinity becomes the wrong one: a kernel
// writing +inf where it declared -inf is not silently accepted). NaN stays NaN. Throws
// mla::Error when the span does not hold b·h·s_q values.
std::vector<double> lse_to_canonical(const Conventions& c, const AttnShape& s, std::span<const double> lse);
// The inverse: canonical lse as the kernel would write it.
std::vector<double> lse_to_kernel(const Conventions& c, const AttnShape& s, std::span<const double> lse);

// The kernel's outputs made canonical in place (out is the same in every convention; lse as
// above). An lse of the wrong size is left as it is, for the judge to report as a shape mismatch.
void outputs_to_canonical(const Conventions& c, const AttnShape& s, AttnOutputs& o);

}  // namespace mla
