// One variant of the plug-in template: which departure it takes (`Fault`) and how it claims,
// declares and shapes itself (`Variant`). The variants' code (variant_plugin.cpp, attacks.cpp)
// is compiled once and linked into every variant; each variant's library adds variant_def.cpp,
// compiled with its own definitions (kernels/faults/CMakeLists.txt, mla_variant_plugin), which
// defines `kVariant`. It is constant-initialized, so every hook reads it, even from the
// libraries' own static initializers, as the value its definitions give.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/plugin/mla_plugin.h"

namespace mla_variant {

// Each is a bug a real decode or append kernel has shipped with, or an attack on the verdict.
enum class Fault {
  none,
  drops_last_token,        // tail tile off by one: never attends position L-1
  lse_log2,                // returns lse in base 2 (FlashInfer's convention), undeclared
  reads_unused_slot,       // dense: attends one slot past L when it lies in the same page
  crashes,                 // zero-length sequence: reads token L-1 = -1 through the block table
  hangs,                   // s_q == 4: waits forever for a split that never arrives
  writes_out_of_bounds,    // s_q == 2: writes one extra output row past the end
  mutates_input,           // pre-scales q in place and leaves it scaled
  returns_nan,             // never writes the last head's output
  tampers_with_goldens,    // correct results, but edits/deletes files named in $MLA_EXAMPLE_TAMPER
  append_half_split_rope,  // append rotates pairs (i, i+32) instead of (2i, 2i+1)
  append_no_capacity_check,  // append writes whatever the block table maps, even at max_seq_len
  append_writes_neighbour,   // append stores two tokens' worth: also into the next slot
  rewrites_audit,          // mutates q, writes past out, changes on call 2, then scrubs the audit
  changes_on_later_call,   // right on calls 1 and 2, off by one ulp from call 3 on
  state_across_processes,  // remembers the case in a file: a later process answers differently
  reads_past_end,          // loads the token after the last one it attends (a two-token load)
  ignores_block_table,     // assumes pages are contiguous: block = b * max_blocks + t / page_size
  leaves_daemon,           // correct results, but leaves a setsid double-forked process behind
  reads_catalog,           // computes nothing: returns the catalog's stored truth
  wraps_negative_index,    // sparse: -1 is padding, other negative indices count from the end
  refuses_unknown,         // the stored truth where it finds it, "unsupported" everywhere else
  hides_overflow,          // the stored truth where it finds it, elsewhere exp() without the max
  memo_by_shape,           // answers from a memo keyed by shape, lengths and block table (not q)
  changes_q_then_refuses,  // writes into q, then says "unsupported"
  prefill_sees_next_key,   // prefill: a causal row attends one key past its last (chunk boundary)
  prefill_top_left,        // prefill: the causal mask aligned top-left (FlashAttention < 2.1), undeclared
  prefill_mscale_missing,  // prefill: 192^-0.5 instead of the scale it is given (YaRN's mscale² dropped)
  prefill_lse_log2,        // prefill: lse in base 2, undeclared
  prefill_skips_empty_rows,  // prefill: writes nothing for a row that attends no key
  merge_base2_as_natural,  // merge: declares FlashInfer's base-2 lse but weighs the sides with e^x
  merge_inf_as_number,     // merge: a +inf lse (FA2's empty row) weighed as a number: NaN
  topk_drops_last_valid,   // top-k: drops the largest logit when it sits at the row's last valid position
  topk_pads_with_masked,   // top-k: fewer valid positions than k: pads with a masked (causal) one
  indexer_no_relu,         // indexer logits: sums q·k over the heads without the relu
  indexer_scale_after_each_token,  // indexer logits: a paged key's scale read after its codes, not from the block's scale area
  indexer_sees_next_token, // indexer logits, next_n 2: the first query token sees the second one's position
  indexer_append_scale_after_each_token,  // indexer append: each token as [128 codes | scale], not the block's scale area
  indexer_append_clamp_after_divide,      // indexer append: max(amax / 448, 1e-4) instead of max(amax, 1e-4) / 448
  indexer_append_writes_skipped_slots,    // indexer append: a negative slot written from the cache's end
  sparse_prefill_minus_one_as_zero,       // sparse prefill: a -1 entry gathered as position 0
  sparse_prefill_lse_log2,                // sparse prefill: lse in base 2, undeclared
  prefill_refuses_one_head,  // prefill: refuses one head when called, after its can_implement accepted it
};

struct Variant {
  const char* name;
  Fault fault;
  bool out_bf16;          // bf16 output (out_dtype)
  bool underclaim;        // claims bf16 cache, dense, up to 64 heads: less than it implements
  bool append;            // exports the append entry point
  int poses_as_minor;     // 0, or 0/1 of ABI 1.0/1.1 (10, 11): the descriptor ends there
  uint32_t writes_recipe;     // 0: the FP8 recipe asked for; else always this one
  uint32_t declares_recipes;  // append_fp8_recipes
  bool bf16_operands;     // FP8 dequantized into bf16, P rounded to bf16 before P·V
  int precision;          // declares 0 nothing, 1 bf16 operands / fp32 accum, 2 fp32 / fp32
  bool flashinfer;        // lse base 2, [b, s_q, h], -inf empty rows; sparse global slots
  bool declares_conventions;  // says so in the descriptor
  bool flashmla_shaped;   // refuses what FlashMLA's decode refuses
  bool can_implement;     // exports that refusal (or the broken predicate) as can_implement
  bool broken_can_implement;  // can_implement errs on sparse shapes and crashes on 128 heads
  bool device_memory;     // sets the device-memory flag with no unavailable() of its own
  bool prefill;           // a prefill-only library (ABI 1.4): no decode, the prefill entry under its name
  bool merge;             // a merge-only library (ABI 1.4): no decode, the merge entry under its name
  bool topk;              // a top-k-only library (ABI 1.4): no decode, the top-k entry under its name
  bool relative;          // top-k: indices relative to the row's start, declared
  bool indexer_logits;    // an indexer-logits-only library (ABI 1.5): no decode, the entry under its name
  bool indexer_append;    // an indexer-append-only library (ABI 1.5): the same
  bool sparse_prefill;    // a sparse-prefill-only library (ABI 1.5): the same
  // The catalog thieves' lookup (catalog_theft.cpp, linked into those three only); null elsewhere.
  bool (*stored_truth)(const mla_plugin_decode_args& a, std::vector<double>& out, std::vector<double>& lse);
};

extern const Variant kVariant;

}  // namespace mla_variant
