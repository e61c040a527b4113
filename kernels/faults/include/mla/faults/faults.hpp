// Deliberately broken implementations, run in this process: the certifier's tests run them
// (`mla certify --fault NAME`) to prove that the suite catches the bug each one carries
// and that every path of the certifier (FAIL, ERROR, a repeatability FAIL, UNSUPPORTED) is taken
// when it should be. Never registered. Each wraps the registered oracle (cpu_mla_fp64) and
// applies its fault outside it, so no oracle has a fault switch. The prefill, merge and top-k
// kinds have their planted bugs here too (prefill_names(), merge_names(), topk_names()): the fp64
// oracles of mla/ref/prefill.hpp called on inputs the bug rewrites, or, where a bug lives in the
// arithmetic or the selection itself, that code written in the fault's own file. So do the
// indexer cache's appends and the indexer logits (indexer_append_names(), indexer_logits_names()).
// The lists are disjoint, so `--fault NAME`
// names one bug of one kind.
//
// This folder is the one home of broken implementations: these, the variants of the plug-in
// template with one real-world bug or attack each (plugins/), and plug-ins whose descriptor
// breaks one rule (kernels/faults/CMakeLists.txt lists them all).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/sparse_prefill.hpp"
#include "mla/core/topk.hpp"

namespace mla::faults {

// The names make() accepts, each with the kernel it builds:
//   dropped_last  cpu_mla_fp64_dropped_last_token: never attends the last cache token of a
//                 sequence (dense queries stop one token early, sparse indices pointing at L-1
//                 are skipped): the classic off-by-one of a tail tile. A sequence of length 1
//                 becomes an empty row (out 0, lse +inf).
//   throws        selftest_throws: run() throws.
//   leaky         selftest_leaky: from the second run on, one output element is NaN (state
//                 carried from one call into the next, docs/field.md, "Bugs", 12).
//   bf16_only     selftest_bf16_only: correct, but claims the bf16 cache only.
//   untuned_heads selftest_untuned_heads: for 17 to 47 heads (between tile sizes 16 and 64) the
//                 last head's output stays zero. No catalog case has such a head count, so only
//                 the fresh family catches it: what a resume must never lose.
const std::vector<std::string>& names();
// Throws mla::Error naming the known faults on an unknown name.
std::unique_ptr<AttentionImpl> make(const std::string& name);

// The prefill bugs (prefill_faults.cpp), each kernel named cpu_prefill_fp64_<fault>, float64
// output, conventions canonical unless the entry says otherwise:
//   causal_off_by_one   each causal query row also sees the key after its last one (where its
//                       sequence has one): `j <= last + 1` for `j <= last`, or a diagonal tile
//                       masked from the wrong column. Changes every causal sequence with at
//                       least 2 queries and 1 key; a row of s_q > s_k just before the first
//                       visible one sees key 0 instead of nothing. Context chunks are untouched,
//                       and so is a softmax so peaked that the extra key weighs nothing (q of std
//                       100: the mask bug hides behind a dominant key).
//   top_left_mask       aligns the causal mask top-left (query i sees keys j <= i, FlashAttention
//                       before 2.1) while declaring bottom-right. Changes every causal sequence
//                       whose query and key counts differ (chunked prefill over a cached prefix).
//   cu_seqlens_shifted  sequence i takes its keys from sequence i+1's cu_seqlens_k range (the
//                       last, whose next entry does not exist, keeps its own): the offsets read
//                       one entry late, a pointer advanced past cu_seqlens_k[0]. Changes every
//                       batch where a sequence with queries gets a different key range (never
//                       a batch of one).
//   no_mscale           uses 192^-0.5 instead of the given softmax_scale: YaRN's mscale² left out
//                       (DeepSeek-V3's 0.1352 is 1.874 x 192^-0.5). Changes every case whose
//                       scale is not 192^-0.5 and that attends anything.
//   v_unpadded_stride   declares V padded to 192 (v_padded) and then reads it with the 128
//                       stride of the unpadded V, so key row t, head h reads the padded buffer at
//                       (t·h_count + h)·128: a stride left from the unpadded build. Only key 0,
//                       head 0 is read right; every case that attends another (key, head) changes.
const std::vector<std::string>& prefill_names();
// Throws mla::Error naming the known prefill faults on an unknown name.
std::unique_ptr<PrefillImpl> make_prefill(const std::string& name);

// The merge bugs (merge_faults.cpp), each kernel named cpu_merge_<fault>, out in the state dtype:
//   lse_base2_as_natural   declares base-2 lse (FlashInfer's merge_state), so the host hands it
//                          lse / ln 2, and merges them with e^x and log: a FlashInfer-style
//                          kernel with a natural-log merge pasted in. Changes every row whose two
//                          sides both hold a finite lse close enough that the weights or the
//                          merged lse move (equal lse included: the weights stay 1/2 each but the
//                          lse is off by ln 2 - (ln 2)²).
//   pos_inf_lse_as_number  tests an lse for -inf only, so FA2's +inf for an empty side goes into
//                          max() and exp() as a number: the row becomes NaN (exp(+inf - +inf)).
//                          Changes every case with a +inf lse; -inf (FA3, FlashInfer) is merged
//                          right, which is why those kernels write it.
//
// Measured mutation score over the stored catalog (suites/kernels/test_prefill_merge_faults.cpp
// prints this table; 11 prefill and 11 merge cases). "affected": the cases the test's own
// predicate says the bug changes; each must FAIL, every other case PASS, and so they do:
//   fault                  affected  FAIL  PASS (unaffected)
//   causal_off_by_one          8       8     3   q_std100's extra keys weigh <= 4e-32: unchanged
//   top_left_mask              8       8     3
//   cu_seqlens_shifted         9       9     2
//   no_mscale                  3       3     8
//   v_unpadded_stride         11      11     0
//   lse_base2_as_natural       8       8     3
//   pos_inf_lse_as_number      4       4     7
const std::vector<std::string>& merge_names();
// Throws mla::Error naming the known merge faults on an unknown name.
std::unique_ptr<MergeImpl> make_merge(const std::string& name);

// The top-k bugs (topk_faults.cpp), each kernel named cpu_topk_<fault>: the exact selection
// (cpu_topk_exact's: sorted, absolute, float32 compares) with one bug of the field each, every
// one FAIL on every drawn top-k case of `mla certify` (each holds a row that shows it):
//   last_valid_dropped          never selects a row's last valid position: the largest logit
//                               sitting there (the newest key of a decode row) is lost.
//   range_end_ignored           scans to the end of the logits row instead of the row's end: a
//                               prefill row selects positions after its own (the causal future).
//   masked_filler               fills a row with fewer valid positions than k with -inf
//                               positions (torch.topk over a masked row) instead of -1.
//   duplicate                   the last selected slot repeats the first.
//   one_short                   one index fewer than min(k, valid positions).
//   padding_first               the -1 padding before the selection (a reader of a prefix,
//                               FlashMLA's topk_length, reads padding).
//   unsorted_declared_sorted    ascending order while declaring the selection sorted.
//   index_past_row              pads with n instead of -1.
//   absolute_declared_relative  writes columns, declares indices relative to the row's start.
//   relative_declared_absolute  writes offsets from the row's start, declares columns.
const std::vector<std::string>& topk_names();
// Throws mla::Error naming the known top-k faults on an unknown name.
std::unique_ptr<TopkImpl> make_topk(const std::string& name);

// The sparse prefill bugs (sparse_prefill_faults.cpp), each kernel named
// cpu_sparse_prefill_<fault without its sparse_ prefix>: cpu_sparse_prefill_f32 with one bug of the
// field each, FAIL on every
// drawn sparse prefill case that has what it needs:
//   sparse_minus_one_as_zero    reads a -1 index as position 0 (a gather without the mask): every case
//                         with a -1 entry in a row whose position 0 is not already a key.
//   sparse_lse_log2             lse in base 2, undeclared: every case with a row that has a key.
//   sparse_sink_in_lse          the sink's mass added to lse: every case with a sink.
//   sparse_ignores_topk_length  reads every entry, past topk_length too: every case with topk_length
//                         cutting a row before a valid entry.
const std::vector<std::string>& sparse_prefill_names();
// Throws mla::Error naming the known sparse prefill faults on an unknown name.
std::unique_ptr<SparsePrefillImpl> make_sparse_prefill(const std::string& name);

// The indexer key cache append bugs (indexer_append_faults.cpp), each kernel named
// cpu_indexer_append_<fault>, ue8m0 and fp32 scales by division; each FAIL on every drawn
// indexer_append case of `mla certify` that has what it needs (a block of more than one token, a
// skipped token), with the judge's diagnosis:
//   scale_after_each_token  stores each token's scale right after its 128 codes (the MLA FP8
//                           token's layout) instead of in the block's scale area after all codes.
//   truncating_codes        rounds each code toward zero instead of to nearest even.
//   fp32_scale_for_ue8m0    writes float32 scales when the call asks for ue8m0 ones.
//   writes_skipped_token    writes a token whose slot is negative into the slot that many from
//                           the end (Python's negative indexing) instead of skipping it.
//   writes_past_codes       copies the scale after the token's codes as well: 4 bytes into the
//                           next slot's codes.
const std::vector<std::string>& indexer_append_names();
// Throws mla::Error naming the known indexer append faults on an unknown name.
std::unique_ptr<IndexerAppendImpl> make_indexer_append(const std::string& name);

// The indexer logits bugs (indexer_logits_faults.cpp), each kernel named
// cpu_indexer_logits_<fault>: a plain serial float32 kernel, paged and ragged, with one bug each,
// FAIL on every drawn indexer_logits case of `mla certify` that has what it needs (a paged call
// for the scale's place, next_n 2 for the later token) and on every stored case of the indexer
// family (each a paged next_n 2 call for them), with the judge's diagnosis:
//   no_relu                  sums the heads' dots without the relu.
//   scale_twice              multiplies by k_scale twice.
//   reads_scale_after_codes  reads each key's scale from right after its 128 codes (a 132-byte
//                            record) instead of the block's scale area after all its codes.
//   sees_later_token         with next_n 2, the first query token sees the second one's position.
//   masked_as_zero           writes 0, not -inf, outside each row's valid range.
//   bf16_accumulation        accumulates each dot in bfloat16 (8 significant bits).
const std::vector<std::string>& indexer_logits_names();
// Throws mla::Error naming the known indexer logits faults on an unknown name.
std::unique_ptr<IndexerLogitsImpl> make_indexer_logits(const std::string& name);
// Not a bug: the same serial float32 loop, right, adding the dims and the heads from the last
// (selftest_indexer_logits_reversed): the tolerance entry indexer.logits.f32's second witness.
std::unique_ptr<IndexerLogitsImpl> make_indexer_logits_reversed_witness();

}  // namespace mla::faults
