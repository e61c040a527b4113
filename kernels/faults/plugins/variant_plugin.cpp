// Variants of the plug-in template (kernels/plugin/examples/example_plugin.cpp): the same
// float64 kernel with one real-world bug, one attack on the certifier, or one other way of
// declaring or shaping itself. The certifier's tests certify each and check the verdict and the
// reason (a bug red for the reason that names it, a right declaration green, a wrong one red).
//
// Design: the template is included whole for its number formats, cache layout, slot checks and
// token encoder (so those exist once, and a variant's numbers are the template's); what follows
// is the template's decode and append again, with a hook at each point where a variant departs
// from it. A variant is one `Variant` value (variant.hpp), and every hook is an `if` on it: each
// library holds the correct kernel and every departure, and takes its own; reading one departure
// means searching for its Fault or field name. This file is compiled once for all the variants
// (each variant's library adds only variant_def.cpp, which defines its value); compiling it
// once per variant cost a minute of CPU per build, and two under the sanitizers. The attacks'
// side effects are in attacks.cpp.
#define MLA_PLUGIN_TEMPLATE_NO_EXPORT 1
#include "example_plugin.cpp"

#include <ctime>
#include <deque>
#include <limits>
#include <optional>
#include <string>

#include "attacks.hpp"
#include "variant.hpp"

namespace {

using mla_variant::Fault;
using mla_variant::Variant;
const Variant& kV = mla_variant::kVariant;

// An entry's description with the variant's name, kept for the library's lifetime (a deque never
// moves the strings it holds when it grows).
const char* described(const char* what) {
  static std::deque<std::string> kept;
  return kept.emplace_back(std::string(what) + kV.name).c_str();
}
bool is(Fault f) { return kV.fault == f; }
const bool kSteals = is(Fault::reads_catalog) || is(Fault::refuses_unknown) || is(Fault::hides_overflow);

// What FlashMLA's decode accepts, as one predicate: decode and can_implement both ask it.
const char* flashmla_refusal(int32_t topk, uint32_t cache_format, int32_t heads, int32_t page_size) {
  if (topk == 0 && cache_format != MLA_PLUGIN_CACHE_BF16) return "dense decode needs the bf16 cache";
  if (topk > 0 && cache_format != MLA_PLUGIN_CACHE_FP8) return "sparse decode needs the FP8 cache";
  if (heads != 64 && heads != 128) return "heads must be 64 or 128";
  if (topk % 64 != 0) return "topk must be a multiple of 64";
  if (page_size != 64) return "page size must be 64";
  return nullptr;
}

int32_t can_implement(const mla_plugin_shape* shape, char* reason, size_t reason_size) {
  if (kV.broken_can_implement) {
    if (shape->topk > 0) {
      std::snprintf(reason, reason_size, "sparse metadata table not initialized");
      return MLA_PLUGIN_ERROR;
    }
    if (shape->heads == 128) {
      const int* volatile table = nullptr;  // the head-count lookup it never allocated
      return table[shape->heads];
    }
    return MLA_PLUGIN_OK;
  }
  if (const char* no = flashmla_refusal(shape->topk, shape->cache_format, shape->heads, shape->page_size)) {
    std::snprintf(reason, reason_size, "%s", no);
    return MLA_PLUGIN_UNSUPPORTED;
  }
  return MLA_PLUGIN_OK;
}

// ---- decode -----------------------------------------------------------------------------------
// The template's attended(), and where the variants depart from it.
void positions_of(const mla_plugin_decode_args& a, int64_t b, int64_t s, std::vector<int64_t>& positions) {
  const int64_t L = a.cache_seqlens[b];
  if (a.topk > 0 && (is(Fault::wraps_negative_index) || kV.flashinfer)) {
    positions.clear();
    const int32_t* row = a.indices + (b * a.s_q + s) * a.topk;
    for (int64_t j = 0; j < a.topk; ++j) {
      int64_t t = row[j];
      // Knows the padding value -1 only, and reads any other negative index the way Python
      // indexing does: -2 becomes L-2, attended once more. It stands for every kernel that knows
      // one invalid value only, which the catalog's other negative kinds are there to catch.
      if (is(Fault::wraps_negative_index) && t < -1) t += L;
      if (kV.flashinfer ? t != -1 : t >= 0 && t < L) positions.push_back(t);  // FlashInfer: a global slot
    }
  } else {
    attended(a, b, s, positions);
  }
  if (is(Fault::drops_last_token)) std::erase(positions, L - 1);
  if (is(Fault::reads_unused_slot)) {  // the tile reads the whole last page
    if (a.topk == 0 && !positions.empty() && positions.back() == L - 1 && L % a.page_size != 0) positions.push_back(L);
  }
}

// The template's load_slot(slot_of()), and where the variants depart from it.
void load(const mla_plugin_decode_args& a, int64_t b, int64_t t, double* k) {
  if (kV.flashinfer && a.topk > 0) {
    load_slot(a, t, k);  // a global slot already
  } else if (is(Fault::ignores_block_table)) {
    load_slot(a, (b * a.max_blocks + t / a.page_size) * a.page_size + t % a.page_size, k);
  } else {
    load_slot(a, slot_of(a, b, t), k);
  }
  if (kV.bf16_operands && a.cache_format == MLA_PLUGIN_CACHE_FP8) {  // the bf16 tile it dequantizes into
    for (int d = 0; d < kLatent; ++d) k[d] = bf16_to_float(bf16_from_float(static_cast<float>(k[d])));
  }
}

// The second half of a two-token vector load at the last attended token: the token stored after
// it in memory, "masked" by a weight of zero, which keeps a NaN a NaN and faults past the end.
double next_token_masked(const mla_plugin_decode_args& a, int64_t b, int64_t t) {
  const int64_t bytes = a.cache_format == MLA_PLUGIN_CACHE_BF16 ? kBf16TokenBytes : kFp8TokenBytes;
  const volatile uint8_t* p = a.kv_cache + (slot_of(a, b, t) + 1) * bytes;
  const double v = a.cache_format == MLA_PLUGIN_CACHE_BF16 ? bf16_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)))
                                                          : kE4m3[p[0]];
  return 0.0 * v;
}

// One query token's rows (all heads) over `positions`: the template's two passes, with hooks.
void attend_row(const mla_plugin_decode_args& a, int64_t b, int64_t s, const std::vector<int64_t>& positions,
                bool perturb) {
  const int64_t S = a.s_q, H = a.heads;
  const std::size_t n = positions.size();
  std::vector<double> q(H * kDqk), k(kDqk), acc(H * kDv, 0.0), sum(H), mx(H), scores(H * n, 0.0);
  for (int64_t h = 0; h < H; ++h) {
    for (int d = 0; d < kDqk; ++d) q[h * kDqk + d] = bf16_to_float(a.q[((b * S + s) * H + h) * kDqk + d]);
  }
  for (std::size_t j = 0; j < n; ++j) {
    load(a, b, positions[j], k.data());
    for (int64_t h = 0; h < H; ++h) {
      scores[h * n + j] = a.softmax_scale * dot_qk(&q[h * kDqk], k.data());
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n; ++j) m = std::max(m, scores[h * n + j]);
    if (is(Fault::hides_overflow)) {  // exp(score) in float, nothing subtracted
      if (n > 0) m = 0;
      for (std::size_t j = 0; j < n; ++j) scores[h * n + j] = static_cast<float>(std::exp(static_cast<float>(scores[h * n + j])));
      for (std::size_t j = 0; j < n; ++j) scores[h * n + j] = std::log(scores[h * n + j]);
    }
    mx[h] = m;
    sum[h] = 0;
    if (kV.bf16_operands) {  // P normalized before P·V, so that it can be rounded as a tile
      for (std::size_t j = 0; j < n; ++j) sum[h] += std::exp(scores[h * n + j] - m);
    }
  }
  for (std::size_t j = 0; j < n; ++j) {
    load(a, b, positions[j], k.data());
    if (is(Fault::reads_past_end)) {
      if (j + 1 == n) k[0] += next_token_masked(a, b, positions[j]);
    }
    for (int64_t h = 0; h < H; ++h) {
      double w = std::exp(scores[h * n + j] - mx[h]);
      if (kV.bf16_operands) {
        w = bf16_to_float(bf16_from_float(static_cast<float>(w / sum[h])));
      } else {
        sum[h] += w;
      }
      for (int d = 0; d < kDv; ++d) acc[h * kDv + d] += w * k[d];
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    const int64_t row = (b * S + s) * H + h;
    for (int d = 0; d < kDv && !(is(Fault::returns_nan) && h == H - 1); ++d) {
      double v = n == 0 ? 0.0 : kV.bf16_operands ? acc[h * kDv + d] : acc[h * kDv + d] / sum[h];
      if (perturb && d == 0) v = std::nextafter(static_cast<float>(v), 1e30f) + 1e-3 * std::fabs(v);
      if (kV.out_bf16) {
        static_cast<uint16_t*>(a.out)[row * kDv + d] = bf16_from_float(static_cast<float>(v));
      } else {
        static_cast<float*>(a.out)[row * kDv + d] = static_cast<float>(v);
      }
    }
    double lse = n == 0 ? std::numeric_limits<double>::infinity() : mx[h] + std::log(sum[h]);
    if (is(Fault::lse_log2)) lse /= std::log(2.0);
    if (kV.flashinfer) {
      lse = n == 0 ? -std::numeric_limits<double>::infinity() : lse / std::log(2.0);
      a.lse[(b * S + s) * H + h] = static_cast<float>(lse);
    } else {
      a.lse[(b * H + h) * S + s] = static_cast<float>(lse);
    }
  }
}

// The unguarded tail path: "the last token" of an empty sequence is position -1, whose page
// index truncates to 0, a block-table entry the sequence does not own.
void read_last_of_empty(const mla_plugin_decode_args& a, int64_t b, char* error, size_t error_size) {
  const int64_t t = -1;
  const int64_t block = a.block_table[b * a.max_blocks + t / a.page_size];
  const volatile uint8_t* p = a.kv_cache + (block * a.page_size + t) * kBf16TokenBytes;
  if (*p == 0x5A) std::snprintf(error, error_size, "unreachable");
}

// Everything a variant does before computing; a return code ends the call there.
std::optional<int32_t> before(const mla_plugin_decode_args& a, bool& perturb, char* error, size_t error_size) {
  if (kV.flashmla_shaped) {
    if (const char* no = flashmla_refusal(a.topk, a.cache_format, a.heads, a.page_size)) {
      std::snprintf(error, error_size, "%s", no);
      return MLA_PLUGIN_UNSUPPORTED;
    }
  }
  if (is(Fault::tampers_with_goldens)) mla_variant::tamper();
  if (is(Fault::leaves_daemon)) mla_variant::leave_daemon();
  if (kSteals) {
    // Stored truth where the inputs are a catalog case's; elsewhere zeros (nothing computed), a
    // refusal, or the overflow bug.
    std::vector<double> out, lse;
    const bool found = kV.stored_truth(a, out, lse);
    if (!found && is(Fault::refuses_unknown)) {
      std::snprintf(error, error_size, "unsupported shape");
      return MLA_PLUGIN_UNSUPPORTED;
    }
    if (found || !is(Fault::hides_overflow)) {
      const std::size_t nout = static_cast<std::size_t>(a.batch) * a.s_q * a.heads * kDv;
      const std::size_t nlse = static_cast<std::size_t>(a.batch) * a.heads * a.s_q;
      for (std::size_t i = 0; i < nout; ++i) static_cast<float*>(a.out)[i] = found ? static_cast<float>(out[i]) : 0.0f;
      for (std::size_t i = 0; i < nlse; ++i) a.lse[i] = found ? static_cast<float>(lse[i]) : 0.0f;
      return MLA_PLUGIN_OK;
    }
  }
  if (is(Fault::changes_q_then_refuses)) {
    const_cast<uint16_t*>(a.q)[0] ^= 0x0001u;
    std::snprintf(error, error_size, "unsupported shape");
    return MLA_PLUGIN_UNSUPPORTED;
  }
  // A "cache" of prepared work that forgot the query is part of the input.
  if (is(Fault::memo_by_shape) && mla_variant::memo_recall(a)) return MLA_PLUGIN_OK;
  static int calls = 0;
  ++calls;
  if (is(Fault::changes_on_later_call)) perturb = calls >= 3;
  if (is(Fault::rewrites_audit)) perturb = calls >= 2;
  if (is(Fault::state_across_processes)) {
    perturb = mla_variant::seen_by_another_process(a, a.cache_format == MLA_PLUGIN_CACHE_BF16 ? kBf16TokenBytes : kFp8TokenBytes);
  }
  if (is(Fault::hangs) && a.s_q == 4) {
    for (;;) {
      const timespec ts{1, 0};
      nanosleep(&ts, nullptr);
    }
  }
  return std::nullopt;
}

// Everything a variant does after computing.
void after(const mla_plugin_decode_args& a) {
  const int64_t rows = int64_t{a.batch} * a.s_q * a.heads;
  if ((is(Fault::writes_out_of_bounds) && a.s_q == 2) || is(Fault::rewrites_audit)) {
    float* past = static_cast<float*>(a.out) + rows * kDv;  // multi-token decode indexes one row past
    for (int d = 0; d < kDv; ++d) past[d] = 0.0f;
  }
  if (is(Fault::mutates_input) || is(Fault::rewrites_audit)) {
    // Pre-scaling q in place "to save a multiply", left behind for the caller.
    uint16_t* q_in = const_cast<uint16_t*>(a.q);
    for (int64_t i = 0; i < rows * kDqk; ++i) {
      q_in[i] = bf16_from_float(static_cast<float>(bf16_to_float(q_in[i]) * a.softmax_scale));
    }
  }
  if (is(Fault::rewrites_audit)) mla_variant::scrub_audit();
  if (is(Fault::memo_by_shape)) {
    mla_variant::memo_store(a, static_cast<std::size_t>(rows * kDv) * (kV.out_bf16 ? 2 : 4), static_cast<std::size_t>(rows) * 4);
  }
}

int32_t decode_variant(const mla_plugin_decode_args* args, char* error, size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_decode_args)) {
    std::snprintf(error, error_size, "decode arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_decode_args& a = *args;
  if (a.d_qk != kDqk || a.d_v != kDv) {
    std::snprintf(error, error_size, "d_qk=%d d_v=%d: only 576/512", a.d_qk, a.d_v);
    return MLA_PLUGIN_UNSUPPORTED;
  }
  bool perturb = false;  // out[..., 0] moved off the right value
  if (const auto rc = before(a, perturb, error, error_size)) return *rc;
  std::vector<int64_t> positions;
  for (int64_t b = 0; b < a.batch; ++b) {
    if (is(Fault::crashes) && a.cache_seqlens[b] == 0) read_last_of_empty(a, b, error, error_size);
    for (int64_t s = 0; s < a.s_q; ++s) {
      positions_of(a, b, s, positions);
      attend_row(a, b, s, positions, perturb);
    }
  }
  after(a);
  return MLA_PLUGIN_OK;
}

// ---- append (ABI 1.1) -------------------------------------------------------------------------
// The template's find_slots without its capacity check: whatever the block table maps is
// written, even at max_seq_len (the row of the next sequence past max_blocks).
int32_t find_slots_unchecked(const mla_plugin_append_args& a, std::vector<int64_t>& slots, char* error,
                             size_t error_size) {
  slots.assign(static_cast<std::size_t>(std::max(0, a.num_tokens)), 0);
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    const int32_t seq = a.seq_ids[i], pos = a.positions[i];
    if (seq < 0 || seq >= a.batch || pos < 0) {
      std::snprintf(error, error_size, "token %d: sequence %d / position %d is malformed", i, seq, pos);
      return MLA_PLUGIN_ERROR;
    }
    const int32_t block = a.block_table[static_cast<int64_t>(seq) * a.max_blocks + pos / a.page_size];
    if (block < 0 || block >= a.num_blocks) {
      std::snprintf(error, error_size, "cache capacity exceeded: token %d of sequence %d at position %d has no page", i,
                    seq, pos);
      return MLA_PLUGIN_CAPACITY;
    }
    slots[static_cast<std::size_t>(i)] = static_cast<int64_t>(block) * a.page_size + pos % a.page_size;
  }
  return MLA_PLUGIN_OK;
}

// The GPT-NeoX layout, not DeepSeek's: rotating pairs (j, j+32) is the template's rotation of the
// pairs (2j, 2j+1) on k_pe re-laid out so that they hold (j, j+32), and the result laid back.
void encode_half_split(const mla_plugin_append_args& a, int32_t i, uint32_t recipe, uint8_t* token) {
  uint16_t pe[kRope];
  const uint16_t* in = a.k_pe + int64_t{i} * kRope;
  for (int j = 0; j < kRope / 2; ++j) {
    pe[2 * j] = in[j];
    pe[2 * j + 1] = in[j + kRope / 2];
  }
  encode_token(a, a.latent + int64_t{i} * kLatent, pe, a.positions[i], recipe, token);
  uint8_t* rope = token + (a.cache_format == MLA_PLUGIN_CACHE_BF16 ? 2 * kLatent : kLatent + 16);
  uint8_t laid[2 * kRope];
  for (int j = 0; j < kRope / 2; ++j) {
    std::memcpy(laid + 2 * j, rope + 4 * j, 2);
    std::memcpy(laid + 2 * (j + kRope / 2), rope + 4 * j + 2, 2);
  }
  std::memcpy(rope, laid, sizeof laid);
}

int32_t append_variant(const mla_plugin_append_args* args, char* error, size_t error_size) {
  if (!args || !MLA_PLUGIN_HAS_FIELD(mla_plugin_append_args, stream, args->struct_size)) {
    std::snprintf(error, error_size, "append arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_append_args& a = *args;
  if (a.cache_format != MLA_PLUGIN_CACHE_FP8 && a.cache_format != MLA_PLUGIN_CACHE_BF16) {
    std::snprintf(error, error_size, "cache_format %u is not one this plug-in writes", a.cache_format);
    return MLA_PLUGIN_UNSUPPORTED;
  }
  // The recipe asked for (a 1.1 host's args end before fp8_recipe: DeepSeek's), or its own always.
  const bool asked = MLA_PLUGIN_HAS_FIELD(mla_plugin_append_args, fp8_recipe, a.struct_size) && a.fp8_recipe;
  uint32_t recipe = asked ? a.fp8_recipe : MLA_PLUGIN_RECIPE_DEEPSEEK_V32;
  if (kV.writes_recipe != 0) recipe = kV.writes_recipe;
  std::vector<int64_t> slots;
  const int32_t rc = is(Fault::append_no_capacity_check) ? find_slots_unchecked(a, slots, error, error_size)
                                                         : find_slots(a, slots, error, error_size);
  if (rc != MLA_PLUGIN_OK) return rc;
  const int64_t bytes = a.cache_format == MLA_PLUGIN_CACHE_FP8 ? kFp8TokenBytes : kBf16TokenBytes;
  std::vector<uint8_t> token(static_cast<std::size_t>(bytes));
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    if (is(Fault::append_half_split_rope)) {
      encode_half_split(a, i, recipe, token.data());
    } else {
      encode_token(a, a.latent + int64_t{i} * kLatent, a.k_pe + int64_t{i} * kRope, a.positions[i], recipe, token.data());
    }
    const int64_t slot = slots[static_cast<std::size_t>(i)];
    if (is(Fault::append_writes_neighbour) && slot + 1 < int64_t{a.num_blocks} * a.page_size) {
      std::memcpy(a.kv_cache + (slot + 1) * bytes, token.data(), token.size());
    }
    std::memcpy(a.kv_cache + slot * bytes, token.data(), token.size());
  }
  return MLA_PLUGIN_OK;
}

// ---- prefill ----------------------------------------------------------------------------------
// The template's prefill with the variant's departure (prefill_with's hooks).
const PrefillDeparture kPrefillDeparture{is(Fault::prefill_sees_next_key) ? 1 : 0, is(Fault::prefill_top_left),
                                         is(Fault::prefill_mscale_missing), is(Fault::prefill_lse_log2),
                                         kV.flashinfer, is(Fault::prefill_skips_empty_rows)};

int32_t prefill_variant(const mla_plugin_prefill_args* args, char* error, size_t error_size) {
  if (is(Fault::prefill_refuses_one_head) && args->heads == 1) {
    std::snprintf(error, error_size, "one head is not a tile of this prefill");
    return MLA_PLUGIN_UNSUPPORTED;
  }
  return prefill_with(args, kPrefillDeparture, error, error_size);
}

// CAN_IMPLEMENT (1.6): the entries' own claims, finer than their declared ranges. The prefill
// runs odd head counts only; it reads the lengths it is shown, so a call without them is an error.
int32_t prefill_can_implement(const mla_plugin_prefill_args* shape, char* reason, size_t reason_size) {
  if (!shape->cu_seqlens_q || !shape->cu_seqlens_k || shape->q || shape->out) {
    std::snprintf(reason, reason_size, "can_implement was shown data, or no lengths");
    return MLA_PLUGIN_ERROR;
  }
  if (shape->heads % 2 == 0) {
    std::snprintf(reason, reason_size, "this prefill runs odd head counts only (%d)", shape->heads);
    return MLA_PLUGIN_UNSUPPORTED;
  }
  return MLA_PLUGIN_OK;
}

mla_plugin_prefill_entry variant_prefill_entry() {
  mla_plugin_prefill_entry e = make_prefill_entry();
  e.name = kV.name;
  e.description = described("example plug-in prefill: float64 accumulation, ");
  e.prefill = prefill_variant;
  if (kV.can_implement) e.can_implement = prefill_can_implement;
  if (kV.flashinfer && kV.declares_conventions) {
    e.lse_base = MLA_PLUGIN_LSE_BASE_2;
    e.lse_layout = MLA_PLUGIN_LSE_B_SQ_H;
    e.empty_row_lse = MLA_PLUGIN_EMPTY_LSE_NEG_INF;
  }
  return e;
}
const mla_plugin_prefill_entry kVariantPrefill = variant_prefill_entry();

// ---- merge ------------------------------------------------------------------------------------
// The template's merge with the variant's departure (merge_with's hooks); FLASHINFER: base-2 lse
// laid out [n, h], declared.
const MergeDeparture kMergeDeparture{kV.flashinfer || is(Fault::merge_base2_as_natural),
                                     is(Fault::merge_base2_as_natural), is(Fault::merge_inf_as_number)};

int32_t merge_variant(const mla_plugin_merge_args* args, char* error, size_t error_size) {
  return merge_with(args, kMergeDeparture, error, error_size);
}

// CAN_IMPLEMENT (1.6): a merge of a prefill's states only (V 128 wide), never of MLA's latent.
int32_t merge_can_implement(const mla_plugin_merge_args* shape, char* reason, size_t reason_size) {
  if (shape->out_a || shape->out) {
    std::snprintf(reason, reason_size, "can_implement was shown data");
    return MLA_PLUGIN_ERROR;
  }
  if (shape->head_dim != 128) {
    std::snprintf(reason, reason_size, "this merge joins 128-wide states only (%d)", shape->head_dim);
    return MLA_PLUGIN_UNSUPPORTED;
  }
  return MLA_PLUGIN_OK;
}

mla_plugin_merge_entry variant_merge_entry() {
  mla_plugin_merge_entry e = make_merge_entry();
  e.name = kV.name;
  e.description = described("example plug-in merge: float64 weights, ");
  e.merge = merge_variant;
  if (kV.can_implement) e.can_implement = merge_can_implement;
  if (kMergeDeparture.base2) {  // the declaration is FlashInfer's; the bug is in the arithmetic
    e.lse_base = MLA_PLUGIN_LSE_BASE_2;
    e.lse_layout = MLA_PLUGIN_LSE_B_SQ_H;
  }
  return e;
}
const mla_plugin_merge_entry kVariantMerge = variant_merge_entry();

// ---- top-k ------------------------------------------------------------------------------------
const TopkDeparture kTopkDeparture{kV.relative, is(Fault::topk_drops_last_valid), is(Fault::topk_pads_with_masked)};

int32_t topk_variant(const mla_plugin_topk_args* args, char* error, size_t error_size) {
  return topk_with(args, kTopkDeparture, error, error_size);
}

// CAN_IMPLEMENT (1.6): a top-k whose pass needs some row of at least k positions (it reads the
// ranges it is shown).
int32_t topk_can_implement(const mla_plugin_topk_args* shape, char* reason, size_t reason_size) {
  if (!shape->starts || !shape->ends || shape->logits || shape->indices) {
    std::snprintf(reason, reason_size, "can_implement was shown data, or no ranges");
    return MLA_PLUGIN_ERROR;
  }
  for (int64_t r = 0; r < shape->rows; ++r) {
    if (shape->ends[r] - shape->starts[r] >= shape->k) return MLA_PLUGIN_OK;
  }
  std::snprintf(reason, reason_size, "this top-k needs a row of at least k = %d positions", shape->k);
  return MLA_PLUGIN_UNSUPPORTED;
}

mla_plugin_topk_entry variant_topk_entry() {
  mla_plugin_topk_entry e = make_topk_entry();
  e.name = kV.name;
  e.description = described("example plug-in top-k: exact, ");
  e.topk = topk_variant;
  if (kV.can_implement) e.can_implement = topk_can_implement;
  e.index_base = kV.relative ? MLA_PLUGIN_INDEX_RELATIVE : MLA_PLUGIN_INDEX_ABSOLUTE;
  return e;
}
const mla_plugin_topk_entry kVariantTopk = variant_topk_entry();

// ---- indexer logits -----------------------------------------------------------------------------
const IndexerDeparture kIndexerDeparture{is(Fault::indexer_no_relu), is(Fault::indexer_scale_after_each_token),
                                         is(Fault::indexer_sees_next_token)};

int32_t indexer_logits_variant(const mla_plugin_indexer_logits_args* args, char* error, size_t error_size) {
  return indexer_logits_with(args, kIndexerDeparture, error, error_size);
}

// CAN_IMPLEMENT (1.6): paged calls of the speculative step only (next_n 2); it is shown the
// lengths of its layout.
int32_t indexer_logits_can_implement(const mla_plugin_indexer_logits_args* shape, char* reason, size_t reason_size) {
  const bool paged = shape->layout == MLA_PLUGIN_INDEXER_PAGED;
  if (shape->q || shape->weights || shape->logits || shape->kv_cache || shape->k_codes ||
      (paged ? !shape->context_lens : (!shape->ks || !shape->ke))) {
    std::snprintf(reason, reason_size, "can_implement was shown data, or not its lengths");
    return MLA_PLUGIN_ERROR;
  }
  if (paged && shape->next_n == 1) {
    std::snprintf(reason, reason_size, "this build's paged logits are the speculative step's only (next_n 2)");
    return MLA_PLUGIN_UNSUPPORTED;
  }
  return MLA_PLUGIN_OK;
}

mla_plugin_indexer_logits_entry variant_indexer_logits_entry() {
  mla_plugin_indexer_logits_entry e = make_indexer_logits_entry();
  e.name = kV.name;
  e.description = described("example plug-in indexer logits: float64, ");
  e.indexer_logits = indexer_logits_variant;
  if (kV.can_implement) e.can_implement = indexer_logits_can_implement;
  return e;
}
const mla_plugin_indexer_logits_entry kVariantIndexerLogits = variant_indexer_logits_entry();

// ---- sparse prefill -----------------------------------------------------------------------------
const SparsePrefillDeparture kSparseDeparture{is(Fault::sparse_prefill_minus_one_as_zero),
                                              is(Fault::sparse_prefill_lse_log2)};

int32_t sparse_prefill_variant(const mla_plugin_sparse_prefill_args* args, char* error, size_t error_size) {
  return sparse_prefill_with(args, kSparseDeparture, error, error_size);
}

// CAN_IMPLEMENT (1.6): no attention sink in this build, though the entry takes one (a kernel
// whose sink path is compiled per head count, say): claimed per call, not per entry.
int32_t sparse_prefill_can_implement(const mla_plugin_sparse_prefill_args* shape, char* reason, size_t reason_size) {
  if (shape->q || shape->kv || shape->indices || shape->out) {
    std::snprintf(reason, reason_size, "can_implement was shown data");
    return MLA_PLUGIN_ERROR;
  }
  if (shape->attn_sink) {
    std::snprintf(reason, reason_size, "this build has no attention sink (%d heads)", shape->heads);
    return MLA_PLUGIN_UNSUPPORTED;
  }
  return MLA_PLUGIN_OK;
}

mla_plugin_sparse_prefill_entry variant_sparse_prefill_entry() {
  mla_plugin_sparse_prefill_entry e = make_sparse_prefill_entry();
  e.name = kV.name;
  e.description = described("example plug-in sparse prefill: float64, ");
  e.sparse_prefill = sparse_prefill_variant;
  if (kV.can_implement) e.can_implement = sparse_prefill_can_implement;
  return e;
}
const mla_plugin_sparse_prefill_entry kVariantSparsePrefill = variant_sparse_prefill_entry();

// ---- indexer append -----------------------------------------------------------------------------
const IndexerAppendDeparture kIndexerAppendDeparture{is(Fault::indexer_append_scale_after_each_token),
                                                     is(Fault::indexer_append_clamp_after_divide),
                                                     is(Fault::indexer_append_writes_skipped_slots)};

// CAN_IMPLEMENT (1.6): ue8m0 scales only, though the entry declares both.
int32_t indexer_append_can_implement(const mla_plugin_indexer_append_args* shape, char* reason, size_t reason_size) {
  if (shape->keys || shape->slot_mapping || shape->kv_cache) {
    std::snprintf(reason, reason_size, "can_implement was shown data");
    return MLA_PLUGIN_ERROR;
  }
  if (shape->scale_fmt != MLA_PLUGIN_SCALE_UE8M0) {
    std::snprintf(reason, reason_size, "this build writes ue8m0 scales only");
    return MLA_PLUGIN_UNSUPPORTED;
  }
  return MLA_PLUGIN_OK;
}

int32_t indexer_append_variant(const mla_plugin_indexer_append_args* args, char* error, size_t error_size) {
  return indexer_append_with(args, kIndexerAppendDeparture, error, error_size);
}

mla_plugin_indexer_append_entry variant_indexer_append_entry() {
  mla_plugin_indexer_append_entry e = make_indexer_append_entry();
  e.name = kV.name;
  e.description = described("example plug-in indexer append: vLLM's recipe, ");
  e.indexer_append = indexer_append_variant;
  if (kV.can_implement) e.can_implement = indexer_append_can_implement;
  return e;
}
const mla_plugin_indexer_append_entry kVariantIndexerAppend = variant_indexer_append_entry();

// ---- descriptor -------------------------------------------------------------------------------
// The template's descriptor, and what each variant claims or declares differently.
mla_plugin_descriptor variant_descriptor() {
  mla_plugin_descriptor d = make_descriptor();
  d.name = kV.name;
  d.description = described("example plug-in: float64 accumulation, ");
  d.decode = decode_variant;
  d.out_dtype = kV.out_bf16 ? MLA_PLUGIN_OUT_BF16 : MLA_PLUGIN_OUT_F32;
  if (kV.underclaim) {
    d.caps.cache_formats = MLA_PLUGIN_CACHE_BF16;
    d.caps.features = MLA_PLUGIN_DENSE | MLA_PLUGIN_VARLEN;
    d.caps.max_heads = 64;
  }
  if (kV.flashmla_shaped) {  // what ranges and masks can say; the rest only a predicate can
    d.caps.min_heads = 64;
    d.caps.num_page_sizes = 1;
    d.caps.page_sizes[0] = 64;
  }
  d.flags = kV.device_memory ? MLA_PLUGIN_FLAG_DEVICE_MEMORY : 0u;
  if (kV.precision == 1) {
    d.operand_precision = MLA_PLUGIN_PRECISION_BF16;
    d.accum_precision = MLA_PLUGIN_PRECISION_FP32;
  } else if (kV.precision == 2) {
    d.operand_precision = MLA_PLUGIN_PRECISION_FP32;
    d.accum_precision = MLA_PLUGIN_PRECISION_FP32;
  }
  if (kV.flashinfer && kV.declares_conventions) {
    d.lse_base = MLA_PLUGIN_LSE_BASE_2;
    d.lse_layout = MLA_PLUGIN_LSE_B_SQ_H;
    d.empty_row_lse = MLA_PLUGIN_EMPTY_LSE_NEG_INF;
    d.index_numbering = MLA_PLUGIN_INDEX_GLOBAL_SLOTS;
  }
  if (kV.can_implement) d.can_implement = can_implement;
  if (kV.append) {
    d.append = append_variant;
    d.append_fp8_recipes = kV.declares_recipes;
  } else {
    d.append = nullptr;
    d.append_formats = 0;
    d.append_scale_fmts = 0;
  }
  // The template's prefill, merge, top-k and indexer logits entries only where the variant is one (their names would
  // repeat in a run certifying several variants); such a variant has no decode.
  d.prefill = nullptr;
  d.merge = nullptr;
  d.topk = nullptr;
  d.indexer_logits = nullptr;
  d.indexer_append = nullptr;
  d.sparse_prefill = nullptr;
  if (kV.sparse_prefill) {
    d.decode = nullptr;
    d.sparse_prefill = &kVariantSparsePrefill;
  }
  if (kV.indexer_append) {
    d.decode = nullptr;
    d.indexer_append = &kVariantIndexerAppend;
  }
  if (kV.indexer_logits) {
    d.decode = nullptr;
    d.indexer_logits = &kVariantIndexerLogits;
  }
  if (kV.topk) {
    d.decode = nullptr;
    d.topk = &kVariantTopk;
  }
  if (kV.prefill) {
    d.decode = nullptr;
    d.prefill = &kVariantPrefill;
  }
  if (kV.merge) {
    d.decode = nullptr;
    d.merge = &kVariantMerge;
  }
  // Posing as a plug-in built against 1.1 or 1.0: struct_size ends before the later fields,
  // which hold garbage (as the bytes after an old, shorter descriptor would) a host must not read.
  if (kV.poses_as_minor == 11) {
    d.struct_size = MLA_PLUGIN_DESCRIPTOR_V1_1_SIZE;
    d.abi_minor = 1;
    d.lse_base = 0xDEADu;
    d.index_numbering = 0xFFFFFFFFu;
    d.operand_precision = 0xFFFFFFFFu;
    d.reserved_1_2 = 0xFFFFFFFFu;
  } else if (kV.poses_as_minor == 10) {
    d.struct_size = MLA_PLUGIN_DESCRIPTOR_V1_0_SIZE;
    d.abi_minor = 0xDEADu;
    d.flags = 0xFFFFFFFFu;
    d.append_formats = 0xFFFFFFFFu;
  }
  return d;
}

const mla_plugin_descriptor kVariantDescriptor = variant_descriptor();

}  // namespace

extern "C" MLA_PLUGIN_EXPORT const mla_plugin_descriptor* mla_plugin_get_descriptor(uint32_t host_abi_version) {
  return host_abi_version == MLA_PLUGIN_ABI_VERSION ? &kVariantDescriptor : nullptr;
}
