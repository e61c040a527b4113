/* mla_plugin.h — the C ABI of an external MLA kernel: attention-core decode, cache append and
 * (from 1.4) prefill in the MHA form, the merge of attention states and the indexer's top-k,
 * (from 1.5) the indexer's logits and its cache append and FlashMLA's sparse prefill, (from 1.6)
 * each of those entries' own can_implement; version 1.6.
 *
 * A plug-in is a shared library that exports one function, mla_plugin_get_descriptor, returning
 * a descriptor: who it is (name, version), what it claims to support (cache formats, head and
 * s_q ranges, page sizes, dense/sparse, variable lengths, output dtype), its decode entry point
 * and, optionally (1.1), a cache-append entry point; from 1.2 also what it is (lse and index
 * conventions, precision class, FP8 scale recipes) and an optional can_implement predicate.
 * `mla certify --plugin path/to/lib.so` runs it, in a separate process, on every golden case
 * inside its claims and judges the results against float64 truth.
 *
 * Why C: a C ABI is the one every compiler and language can produce and load without sharing a
 * C++ standard library, so a kernel built elsewhere (another compiler, CUDA, Rust) can be
 * certified without rebuilding this suite. Everything crossing the boundary is plain data.
 *
 * Versioning: MLA_PLUGIN_ABI_VERSION changes whenever a field changes meaning or moves. A host
 * refuses a descriptor of another version; `struct_size` fields let a later minor revision append
 * fields without breaking older plug-ins (a reader never reads past the size the writer gave).
 *
 * Minor revisions (MLA_PLUGIN_ABI_MINOR) only append fields at the end of a struct. The rule:
 *  - the writer sets struct_size = sizeof(the struct as it compiled it);
 *  - a reader uses a field only when struct_size covers it entirely (MLA_PLUGIN_HAS_FIELD), and
 *    treats a field the writer did not have as zero / NULL: "not provided";
 *  - a host accepts any descriptor at least as large as revision 1.0's (MLA_PLUGIN_DESCRIPTOR_V1_0_SIZE);
 *  - a plug-in reading arguments checks struct_size the same way before using a later field.
 * So a 1.0 plug-in (no append, host memory) loads unchanged in a 1.1 or 1.2 host, and a 1.2
 * plug-in works in a 1.0 or 1.1 host that simply never looks at the appended fields. Every field
 * a revision appends reads as zero when absent, and zero is always the earlier revisions' meaning.
 *
 * Revision 1.1 adds: the optional `append` entry point (writing tokens into the paged cache) with
 * the formats it writes, and `flags` by which a CUDA plug-in asks for DEVICE pointers and a
 * stream (MLA_PLUGIN_FLAG_DEVICE_MEMORY).
 *
 * Revision 1.2 adds what a production kernel needs to be certified as it is (docs/field.md, "The
 * peers' conventions"), all declared, none assumed:
 *  - conventions: lse base (e or 2), lse layout ([b,h,s_q] or [b,s_q,h]), the lse of an empty row
 *    (+inf or -inf), sparse index numbering (positions, or global cache slots with -1 the only
 *    invalid marker). The host converts its canonical inputs to them before the call and the
 *    outputs back before judging, and records them in the certificate;
 *  - the precision class: operand and accumulation precision (with out_dtype, the output's); the
 *    tolerance is chosen from it;
 *  - the FP8 scale recipes the append writes (DeepSeek's or FlashMLA's), and in the append
 *    arguments the one to write;
 *  - `can_implement`, an optional predicate on a shape finer than the capability ranges (FlashMLA:
 *    dense needs the bf16 cache, sparse needs FP8, heads in {64, 128}, topk % 64 == 0). It is
 *    called in the certifier's child process, before any case is run; a shape it refuses is not
 *    claimed, with its own reason, and never counted against the kernel.
 *
 * Revision 1.3 adds the cache lengths to the shape can_implement sees (`cache_seqlens`), so a
 * kernel whose domain depends on them (a causal row that attends nothing, a length past its grid)
 * can say so before it is called. A shape it accepts and then refuses when called is a broken
 * claim: FAIL, with its words.
 *
 * Revision 1.4 adds three more kinds of kernel: PREFILL in the MHA form (mla/core/prefill.hpp;
 * what FlashAttention's varlen forward, FlashInfer's ragged prefill and FlashMLA's dense prefill
 * compute), the MERGE of two partial attention states (mla/core/merge.hpp; vLLM's
 * merge_attn_states, FlashInfer's merge_state) and V3.2's TOP-K selection over the indexer's
 * logits (mla/core/topk.hpp; vLLM's and FlashInfer's top-k). The descriptor points to an
 * `mla_plugin_prefill_entry`, an `mla_plugin_merge_entry` and/or an `mla_plugin_topk_entry`,
 * structs of their own with their own struct_size, name, claims, conventions and entry point;
 * each is certified as its own implementation, under its own name, beside the decode. With any
 * of them, decode may be NULL (a library without a decode); `caps` is then ignored.
 *
 * Revision 1.5 adds V3.2's lightning indexer: its LOGITS (mla/core/indexer_logits.hpp; what
 * DeepGEMM's fp8_paged_mqa_logits and fp8_mqa_logits compute) and the APPEND of its keys into the
 * paged 132-byte cache (mla/core/indexer_cache.hpp; vLLM's indexer_k_quant_and_cache): an
 * `mla_plugin_indexer_logits_entry` and an `mla_plugin_indexer_append_entry`; and FlashMLA's SPARSE
 * PREFILL (mla/core/sparse_prefill.hpp; flash_mla_sparse_fwd): an `mla_plugin_sparse_prefill_entry`.
 * Entries of the same kind as 1.4's, any of which may also be a library's only one.
 *
 * Revision 1.6 gives every entry of 1.4 and 1.5 a `can_implement` of its own, the decode's
 * predicate (1.2) for its kind: it sees the call's argument struct before any data exists (every
 * data pointer NULL but the lengths: the prefill's cu_seqlens_q/_k, the sparse prefill's
 * topk_length, the top-k's starts/ends, the indexer logits' context_lens or ks/ke; a sparse call
 * with an attention sink gets attn_sink pointing at `heads` zeros, since only its presence is part
 * of the shape), is asked in the certifier's child before the entry is called, and answers as the
 * decode's does: MLA_PLUGIN_OK claims the call, MLA_PLUGIN_UNSUPPORTED with a reason does not
 * (NOT_CLAIMED, never counted against the kernel), any other code is the kernel's ERROR; a call it
 * accepted and the entry then refuses is a broken claim (FAIL). Refusing what it cannot look up
 * gains a kernel nothing: every stored prefill, merge and indexer case is also certified, for a
 * kernel from outside, on its fresh twin of the same shape.
 *
 * Data layouts are those of fixtures/SCHEMA.md and of mla::AttnInputs: a bf16 absorbed query, a
 * paged latent cache (bf16: 576 bf16 values per token; fp8: the 656-byte V3.2 token), a block
 * table and per-sequence lengths. Positions at or past cache_seqlens[b] and block-table entries
 * past ceil(L/page_size) are NOT part of the input: the goldens poison them (NaN, a sentinel
 * block id) and a kernel that reads them fails.
 */
#ifndef MLA_PLUGIN_H
#define MLA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MLA_PLUGIN_ABI_VERSION 1u
#define MLA_PLUGIN_ABI_MINOR 6u /* 1.1: append entry point, device memory flag; 1.2: conventions,
                                   precision class, FP8 recipes, can_implement; 1.3: lengths in
                                   can_implement's shape; 1.4: the prefill, merge and top-k entries;
                                   1.5: the indexer logits, indexer append and sparse prefill
                                   entries; 1.6: can_implement for each of those entries */
#define MLA_PLUGIN_ENTRY_SYMBOL "mla_plugin_get_descriptor"

/* Cache formats (bit mask in capabilities, a single bit in decode arguments). */
#define MLA_PLUGIN_CACHE_BF16 0x1u /* 576 bf16 values per token: latent 512 | rope 64 (1152 bytes) */
#define MLA_PLUGIN_CACHE_FP8 0x2u  /* 656 bytes: 512 e4m3 | 4 float32 scales | 64 bf16 rope */

/* Features (bit mask). */
#define MLA_PLUGIN_DENSE 0x1u  /* topk == 0: attend every position a query may see */
#define MLA_PLUGIN_SPARSE 0x2u /* topk > 0: attend the listed positions; invalid ones are skipped */
#define MLA_PLUGIN_VARLEN 0x4u /* sequences of one batch may have different lengths */

/* Output dtype of `out` (lse is always float32). */
#define MLA_PLUGIN_OUT_F32 1
#define MLA_PLUGIN_OUT_BF16 2

/* Return codes of decode. */
#define MLA_PLUGIN_OK 0
#define MLA_PLUGIN_ERROR 1       /* failed: the host records ERROR with the message */
#define MLA_PLUGIN_UNSUPPORTED 2 /* refuses this shape: the host records UNSUPPORTED (it should
                                    have been excluded by the capabilities; the report says so) */
#define MLA_PLUGIN_CAPACITY 3    /* append only (1.1): a token lies past the cache's capacity; the
                                    call wrote nothing (a certified property) */

/* Scale formats of the FP8 cache (bit mask in append_scale_fmts, a single bit in append args):
 * the per-128 block float32 scale of the recipe (below), as it is, or rounded up to a power of two. */
#define MLA_PLUGIN_SCALE_FP32 0x1u
#define MLA_PLUGIN_SCALE_UE8M0 0x2u

/* FP8 scale recipes (1.2; bit mask in append_fp8_recipes, a single bit in append args): how a
 * block's scale follows from its amax. They differ exactly for amax < 448 * 1e-4 (an all-zero
 * block: 1e-4/448, ue8m0 2^-22, against 1e-4, ue8m0 2^-13). */
#define MLA_PLUGIN_RECIPE_DEEPSEEK_V32 0x1u /* DeepSeek V3.2 inference: max(amax, 1e-4) / 448 */
#define MLA_PLUGIN_RECIPE_FLASHMLA 0x2u     /* FlashMLA's quantizer, vLLM's fp8_ds_mla: max(amax / 448, 1e-4) */

/* Conventions (1.2). Zero is the canonical one, which every 1.0/1.1 plug-in follows. */
#define MLA_PLUGIN_LSE_BASE_E 0u       /* natural log */
#define MLA_PLUGIN_LSE_BASE_2 1u       /* log2 (FlashInfer's default) */
#define MLA_PLUGIN_LSE_B_H_SQ 0u       /* lse [batch, heads, s_q] */
#define MLA_PLUGIN_LSE_B_SQ_H 1u       /* lse [batch, s_q, heads] (FlashInfer's) */
#define MLA_PLUGIN_EMPTY_LSE_POS_INF 0u /* a row that attends nothing has lse +inf (and out 0) */
#define MLA_PLUGIN_EMPTY_LSE_NEG_INF 1u /* ... lse -inf (FlashInfer's) */
#define MLA_PLUGIN_INDEX_POSITIONS 0u  /* sparse indices are positions within the sequence: valid
                                          when 0 <= idx < cache_seqlens[b], every other value invalid */
#define MLA_PLUGIN_INDEX_GLOBAL_SLOTS 1u /* global cache slots block_table[b][p / page_size] *
                                            page_size + p % page_size, and -1 the ONLY invalid value
                                            (FlashMLA's, FlashInfer's, vLLM's) */

/* Precision of operands and accumulation (1.2). 0 in both: undeclared, the class out_dtype
 * implies (float32 out: float32 operands and accumulation; bf16 out: bf16 operands, float32
 * accumulation), the rule before 1.2. */
#define MLA_PLUGIN_PRECISION_UNDECLARED 0u
#define MLA_PLUGIN_PRECISION_FP64 1u
#define MLA_PLUGIN_PRECISION_FP32 2u
#define MLA_PLUGIN_PRECISION_BF16 3u /* operands only: the products read bf16 tiles (an FP8 cache
                                        dequantized into bf16, P rounded to bf16) */

/* Descriptor flags (1.1). */
#define MLA_PLUGIN_FLAG_DEVICE_MEMORY 0x1u /* every pointer in decode/append arguments is CUDA device
                                              memory, and `stream` a non-default cudaStream_t */

#define MLA_PLUGIN_MAX_PAGE_SIZES 16

typedef struct mla_plugin_capabilities {
  uint32_t cache_formats; /* MLA_PLUGIN_CACHE_* bits, at least one */
  uint32_t features;      /* MLA_PLUGIN_DENSE / _SPARSE / _VARLEN bits; DENSE or SPARSE at least */
  int32_t min_heads, max_heads; /* 1 <= min <= max */
  int32_t min_s_q, max_s_q;     /* 1 <= min <= max: query tokens per sequence per call */
  int32_t num_page_sizes;       /* 0: any page size; else the first num_page_sizes entries */
  int32_t page_sizes[MLA_PLUGIN_MAX_PAGE_SIZES];
} mla_plugin_capabilities;

/* One decode call. All pointers are HOST memory unless the descriptor sets
 * MLA_PLUGIN_FLAG_DEVICE_MEMORY (1.1); then they are device memory of the current CUDA device, the
 * host passes a stream created with cudaStreamNonBlocking in `stream`, and the plug-in enqueues
 * its work on that stream (it may return before the work ends: the host synchronizes the stream,
 * and nothing else, before it reads anything). A host-memory plug-in has finished all work before
 * it returns. Inputs are
 * read-only: the host checksums them before and after the call. Outputs are fresh buffers
 * pre-filled with NaN and surrounded by guard bytes: every element must be written, nothing
 * outside them. The call must be deterministic: the host calls twice and compares bit for bit. */
typedef struct mla_plugin_decode_args {
  uint32_t struct_size; /* sizeof(mla_plugin_decode_args) as the host compiled it */
  int32_t batch, s_q, heads;
  int32_t d_qk, d_v; /* 576 and 512 */
  int32_t page_size, num_blocks, max_blocks;
  int32_t topk;         /* 0: dense */
  uint32_t cache_format; /* MLA_PLUGIN_CACHE_BF16 or MLA_PLUGIN_CACHE_FP8 */
  int32_t causal;       /* dense, 1: query s (of s_q) sees positions <= L - s_q + s; 0: all < L */
  double softmax_scale; /* scores = softmax_scale * (q . k) over all d_qk dims */

  const uint16_t* q;             /* [batch, s_q, heads, d_qk] bf16 bits */
  const uint8_t* kv_cache;       /* [num_blocks, page_size, bytes per token] */
  const int32_t* block_table;    /* [batch, max_blocks] */
  const int32_t* cache_seqlens;  /* [batch], 0 <= L <= max_blocks * page_size */
  const int32_t* indices;        /* [batch, s_q, topk] positions, or global slots as the descriptor's
                                    index_numbering says (1.2); NULL when topk == 0 */

  void* out;  /* [batch, s_q, heads, d_v]: float32, or bf16 bits (uint16_t), per out_dtype */
  float* lse; /* [batch, heads, s_q]: natural-log sum of exp(scores); +inf for a row that
                 attends nothing (whose out is 0). A 1.2 plug-in may declare another base, layout
                 and empty-row value (lse_base, lse_layout, empty_row_lse): same element count. */

  void* stream; /* device-memory plug-ins: the cudaStream_t to run on (never the legacy default
                   stream); NULL for host-memory plug-ins */
} mla_plugin_decode_args;

/* One append call (1.1): tokens written into the paged latent cache, the write half of decode.
 * Per token i: the latent row is RMS-normalized in float64-or-better precision,
 *   c = latent_i / sqrt(mean(latent_i^2) + eps) * kv_norm_weight,
 * k_pe is rotated on INTERLEAVED pairs (2j, 2j+1) by positions[i] * inv_freq[j]:
 *   (x0 cos - x1 sin, x0 sin + x1 cos),
 * and [c | k_pe] is stored at slot block_table[seq_ids[i] * max_blocks + pos / page_size] *
 * page_size + pos % page_size: as 576 bf16 values (MLA_PLUGIN_CACHE_BF16), or as the 656-byte FP8
 * token (c quantized per 128-value block with the scale of scale_fmt, k_pe as bf16).
 *
 * Capacity: a token whose position is >= max_seq_len, whose page index is >= max_blocks or whose
 * block-table entry lies outside [0, num_blocks) cannot be stored: the call returns
 * MLA_PLUGIN_CAPACITY having written NOTHING (check every token before the first write). A
 * malformed call (sequence id outside [0, batch), negative position) returns MLA_PLUGIN_ERROR.
 * Positions are distinct within a sequence in one call. Every slot no token maps to must keep
 * its bytes; the certifier compares them byte for byte. */
typedef struct mla_plugin_append_args {
  uint32_t struct_size; /* sizeof(mla_plugin_append_args) as the host compiled it */
  int32_t num_tokens;   /* >= 0; 0 writes nothing */
  int32_t batch, max_blocks, page_size, num_blocks;
  int64_t max_seq_len;
  uint32_t cache_format; /* MLA_PLUGIN_CACHE_BF16 or MLA_PLUGIN_CACHE_FP8 */
  uint32_t scale_fmt;    /* FP8: MLA_PLUGIN_SCALE_FP32 or MLA_PLUGIN_SCALE_UE8M0; 0 for bf16 */
  double eps;            /* RMSNorm epsilon, 1e-6 upstream */

  const uint16_t* latent;         /* [num_tokens, 512] bf16 bits, before kv_norm */
  const uint16_t* k_pe;           /* [num_tokens, 64] bf16 bits, before RoPE */
  const uint16_t* kv_norm_weight; /* [512] bf16 bits */
  const double* inv_freq;         /* [32] float64 inverse frequencies (YaRN-corrected) */
  const int32_t* seq_ids;         /* [num_tokens] */
  const int32_t* positions;       /* [num_tokens] */
  const int32_t* block_table;     /* [batch, max_blocks] */
  uint8_t* kv_cache;              /* [num_blocks, page_size, bytes per token], read and written */

  void* stream; /* as in mla_plugin_decode_args */
  /* ---- 1.2 (check struct_size: absent from a 1.1 host, which means DeepSeek's recipe) ---- */
  uint32_t fp8_recipe; /* FP8: MLA_PLUGIN_RECIPE_DEEPSEEK_V32 or MLA_PLUGIN_RECIPE_FLASHMLA, one of the
                          descriptor's append_fp8_recipes; 0 for bf16 */
} mla_plugin_append_args;

/* A shape, as can_implement (1.2) sees it: what decode will be called with, before any data;
 * from 1.3 with the lengths too (whether they may vary is a capability, MLA_PLUGIN_VARLEN). */
typedef struct mla_plugin_shape {
  uint32_t struct_size; /* sizeof(mla_plugin_shape) as the host compiled it */
  int32_t batch, s_q, heads;
  int32_t d_qk, d_v; /* 576 and 512 */
  int32_t page_size, num_blocks, max_blocks;
  int32_t topk;          /* 0: dense */
  uint32_t cache_format; /* MLA_PLUGIN_CACHE_BF16 or MLA_PLUGIN_CACHE_FP8 */
  int32_t causal;        /* as in mla_plugin_decode_args */
  uint32_t scale_fmt;    /* FP8: MLA_PLUGIN_SCALE_FP32 or MLA_PLUGIN_SCALE_UE8M0; 0 for bf16 */
  /* ---- 1.3 (check struct_size: a 1.2 host does not pass them) ---- */
  const int32_t* cache_seqlens; /* [batch]: the lengths decode will be called with */
} mla_plugin_shape;

/* ---- 1.4: prefill in the MHA form ------------------------------------------------------------
 *
 * Per head h: q = [q_nope 128 | q_pe 64], k = [k_nope 128 | k_pe 64] (k_pe the same for every
 * head: the host has decompressed the latent cache), v 128 wide. A ragged batch is packed along
 * the token axis and cut by cu_seqlens_q / cu_seqlens_k ([batch + 1], from 0, non-decreasing,
 * ending at total_q / total_k). Sequence b has s_q = cu_seqlens_q[b+1] - cu_seqlens_q[b] queries
 * and s_k keys; causal: query i attends keys j <= s_k - s_q + i (bottom-right aligned: chunked
 * prefill over a cached prefix is one call, and the first rows of a sequence with s_q > s_k attend
 * nothing); non-causal (a context chunk of chunked prefill): every key of its sequence, possibly
 * none. scores = softmax_scale * (q . k) over the 192 dims. A row that attends nothing has out 0
 * and lse +inf (canonically). */

/* Which calls the prefill entry claims (bit mask in mla_plugin_prefill_entry.calls). */
#define MLA_PLUGIN_PREFILL_CAUSAL 0x1u     /* causal calls */
#define MLA_PLUGIN_PREFILL_NON_CAUSAL 0x2u /* context-chunk (non-causal) calls */
#define MLA_PLUGIN_PREFILL_VARLEN 0x4u     /* sequences of different lengths in one batch */

/* How a causal prefill aligns its mask: bottom-right (the canonical, above) or top-left (query i
 * attends keys j <= i; FlashAttention before 2.1). The two agree only where s_q == s_k, so a
 * top-left kernel is called on such causal sequences only: no conversion turns one into the other. */
#define MLA_PLUGIN_CAUSAL_BOTTOM_RIGHT 0u
#define MLA_PLUGIN_CAUSAL_TOP_LEFT 1u

/* One prefill call. Pointers as in mla_plugin_decode_args (host memory, or device memory and a
 * stream under MLA_PLUGIN_FLAG_DEVICE_MEMORY); inputs read-only and checksummed, outputs fresh
 * buffers pre-filled with NaN between guard bytes: write every element and nothing outside; the
 * call must be deterministic. */
typedef struct mla_plugin_prefill_args {
  uint32_t struct_size; /* sizeof(mla_plugin_prefill_args) as the host compiled it */
  int32_t batch, heads;
  int64_t total_q, total_k;
  int32_t d_qk;  /* 192 */
  int32_t d_v;   /* 128, or 192 for an entry that declares v_padded (V zero after 128; out 192 wide) */
  int32_t causal; /* 1: causal, aligned as the entry declares; 0: a context chunk */
  double softmax_scale; /* 192^-0.5 * mscale^2 under the model's YaRN: use it as given */

  const uint16_t* q;            /* [total_q, heads, d_qk] bf16 bits */
  const uint16_t* k;            /* [total_k, heads, d_qk] bf16 bits */
  const uint16_t* v;            /* [total_k, heads, d_v] bf16 bits */
  const int32_t* cu_seqlens_q;  /* [batch + 1] */
  const int32_t* cu_seqlens_k;  /* [batch + 1] */

  void* out;  /* [total_q, heads, d_v]: float32, or bf16 bits, per the entry's out_dtype */
  float* lse; /* [heads, total_q] natural log, +inf for an empty row; or as the entry declares
                 (lse_layout MLA_PLUGIN_LSE_B_SQ_H: [total_q, heads]; base 2; -inf): same count */

  void* stream; /* as in mla_plugin_decode_args */
} mla_plugin_prefill_args;

/* Returns MLA_PLUGIN_OK, or another code with a NUL-terminated message in error[0..error_size)
 * (MLA_PLUGIN_UNSUPPORTED for a call inside its claims is a broken claim: FAIL). */
typedef int32_t (*mla_plugin_prefill_fn)(const mla_plugin_prefill_args* args, char* error, size_t error_size);

/* Optional (1.6): whether the prefill implements the call `shape` describes (its data pointers
 * NULL, cu_seqlens_q/_k given), which already lies inside the entry's claims. Returns as the
 * decode's can_implement (mla_plugin_can_implement_fn): MLA_PLUGIN_OK, or MLA_PLUGIN_UNSUPPORTED
 * with a reason; pure. */
typedef int32_t (*mla_plugin_prefill_can_implement_fn)(const mla_plugin_prefill_args* shape, char* reason,
                                                       size_t reason_size);

/* The prefill entry (1.4): its own implementation in the certificate. The conventions and the
 * precision class mean what the descriptor's do for decode (zero: the canonical / the class
 * out_dtype implies); lse layout MLA_PLUGIN_LSE_B_H_SQ is [heads, total_q] (FlashAttention's),
 * MLA_PLUGIN_LSE_B_SQ_H is [total_q, heads] (FlashInfer's, FlashMLA's view). */
typedef struct mla_plugin_prefill_entry {
  uint32_t struct_size; /* sizeof(mla_plugin_prefill_entry) as the plug-in compiled it */
  const char* name;     /* [a-z0-9_]+, not the decode's name: the prefill implementation's row */
  const char* description; /* one line */
  int32_t out_dtype;    /* MLA_PLUGIN_OUT_F32 or MLA_PLUGIN_OUT_BF16 */
  int32_t min_heads, max_heads; /* 1 <= min <= max */
  uint32_t calls;       /* MLA_PLUGIN_PREFILL_* bits: CAUSAL or NON_CAUSAL at least */
  int64_t max_total_tokens; /* >= 1: the most query rows, and the most key rows, of one call */
  uint32_t lse_base;      /* MLA_PLUGIN_LSE_BASE_E or _2 */
  uint32_t lse_layout;    /* MLA_PLUGIN_LSE_B_H_SQ ([heads, total_q]) or _B_SQ_H ([total_q, heads]) */
  uint32_t empty_row_lse; /* MLA_PLUGIN_EMPTY_LSE_POS_INF or _NEG_INF */
  uint32_t v_padded;      /* 0, or 1: V handed over padded to 192 and out written 192 wide */
  uint32_t causal_alignment; /* MLA_PLUGIN_CAUSAL_BOTTOM_RIGHT or _TOP_LEFT */
  uint32_t operand_precision; /* MLA_PLUGIN_PRECISION_*; UNDECLARED in both or in neither */
  uint32_t accum_precision;
  mla_plugin_prefill_fn prefill; /* required */
  /* ---- 1.6 (read only when struct_size covers it) ---- */
  mla_plugin_prefill_can_implement_fn can_implement; /* optional, may be NULL */
} mla_plugin_prefill_entry;

/* ---- 1.4: merging two partial attention states ----------------------------------------------
 *
 *   lse = log(e^lse_a + e^lse_b),  out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b
 *
 * over n query rows, h heads and d values (128 for a prefill's V, 512 for MLA's latent). An
 * infinite input lse (+inf or -inf) means that side attended nothing: its weight is 0 and its out
 * is never read (it may hold NaN). Both sides empty: out 0 and lse -inf (or the declared +inf),
 * never NaN. Canonically lse is [h, n], natural log; out_a, out_b and out are [n, h, d] of the
 * state dtype. */

/* State dtypes (bit mask in mla_plugin_merge_entry.dtypes, a single bit in the arguments). */
#define MLA_PLUGIN_STATE_BF16 0x1u
#define MLA_PLUGIN_STATE_F16 0x2u
#define MLA_PLUGIN_STATE_F32 0x4u

#define MLA_PLUGIN_MAX_HEAD_DIMS 16

/* One merge call; pointers and the audit as in mla_plugin_prefill_args. */
typedef struct mla_plugin_merge_args {
  uint32_t struct_size; /* sizeof(mla_plugin_merge_args) as the host compiled it */
  int64_t tokens;       /* n >= 0 */
  int32_t heads, head_dim;
  uint32_t dtype;       /* one MLA_PLUGIN_STATE_* bit of the entry's dtypes */
  const void* out_a;    /* [n, heads, head_dim] of dtype */
  const float* lse_a;   /* [heads, n] (or as the entry declares) */
  const void* out_b;
  const float* lse_b;
  void* out;            /* [n, heads, head_dim] of dtype: write every element */
  float* lse;           /* as lse_a: write every element */
  void* stream;         /* as in mla_plugin_decode_args */
} mla_plugin_merge_args;

typedef int32_t (*mla_plugin_merge_fn)(const mla_plugin_merge_args* args, char* error, size_t error_size);

/* Optional (1.6): whether the merge implements the call `shape` describes (every pointer NULL). */
typedef int32_t (*mla_plugin_merge_can_implement_fn)(const mla_plugin_merge_args* shape, char* reason,
                                                     size_t reason_size);

/* What a merge writes as lse when both sides are empty (zero the canonical, as everywhere). */
#define MLA_PLUGIN_MERGE_EMPTY_NEG_INF 0u /* -inf: log 0 (vLLM's CUDA kernel, FlashInfer) */
#define MLA_PLUGIN_MERGE_EMPTY_POS_INF 1u /* +inf */

/* The merge entry (1.4): its own implementation in the certificate. lse_base and lse_layout apply
 * to the inputs and the output (MLA_PLUGIN_LSE_B_H_SQ: [heads, n] as vLLM's; _B_SQ_H: [n, heads]
 * as FlashInfer's, whose merge_state is also base 2). */
typedef struct mla_plugin_merge_entry {
  uint32_t struct_size; /* sizeof(mla_plugin_merge_entry) as the plug-in compiled it */
  const char* name;     /* [a-z0-9_]+, unlike every other entry's */
  const char* description;
  uint32_t dtypes;      /* MLA_PLUGIN_STATE_* bits, at least one */
  int32_t num_head_dims; /* 0: any head_dim; else the first num_head_dims entries */
  int32_t head_dims[MLA_PLUGIN_MAX_HEAD_DIMS];
  uint32_t lse_base;       /* MLA_PLUGIN_LSE_BASE_E or _2 */
  uint32_t lse_layout;     /* MLA_PLUGIN_LSE_B_H_SQ or _B_SQ_H */
  uint32_t both_empty_lse; /* MLA_PLUGIN_MERGE_EMPTY_NEG_INF or _POS_INF */
  mla_plugin_merge_fn merge; /* required */
  /* ---- 1.6 (read only when struct_size covers it) ---- */
  mla_plugin_merge_can_implement_fn can_implement; /* optional, may be NULL */
} mla_plugin_merge_entry;

/* ---- 1.4: top-k over the indexer's logits -------------------------------------------------------
 *
 * logits [rows, n] float32 row-major; row r's valid positions are those in [starts[r], ends[r])
 * whose logit is finite (-inf: masked); outside the range the logits may hold anything, NaN
 * included, and are never to be read. Output indices [rows, k] int32: min(k, valid positions)
 * distinct valid positions of the row's k largest, then -1 padding up to k. Near-ties are judged
 * within the tolerance of the declared logits precision; a clear top-k member dropped, a masked
 * or out-of-range position, or a duplicate always fails. */

#define MLA_PLUGIN_MAX_KS 16

#define MLA_PLUGIN_INDEX_ABSOLUTE 0u /* indices are columns of the logits row (canonical) */
#define MLA_PLUGIN_INDEX_RELATIVE 1u /* indices count from the row's start (vLLM's radix top-k) */

#define MLA_PLUGIN_LOGITS_F32 0u  /* compares the given float32 logits (canonical) */
#define MLA_PLUGIN_LOGITS_BF16 1u /* compares them rounded to bfloat16 (a 16-bit radix pass) */

typedef struct mla_plugin_topk_args {
  uint32_t struct_size; /* sizeof(mla_plugin_topk_args) as the host compiled it */
  int64_t rows, n;
  int32_t k;
  const float* logits;    /* [rows, n] */
  const int32_t* starts;  /* [rows] */
  const int32_t* ends;    /* [rows] */
  int32_t* indices;       /* [rows, k]: write every element */
  void* stream;           /* as in mla_plugin_decode_args */
} mla_plugin_topk_args;

typedef int32_t (*mla_plugin_topk_fn)(const mla_plugin_topk_args* args, char* error, size_t error_size);

/* Optional (1.6): whether the top-k implements the call `shape` describes (logits and indices NULL,
 * starts and ends given). */
typedef int32_t (*mla_plugin_topk_can_implement_fn)(const mla_plugin_topk_args* shape, char* reason,
                                                    size_t reason_size);

/* The top-k entry (1.4): its own implementation in the certificate. */
typedef struct mla_plugin_topk_entry {
  uint32_t struct_size; /* sizeof(mla_plugin_topk_entry) as the plug-in compiled it */
  const char* name;     /* [a-z0-9_]+, unlike every other entry's */
  const char* description;
  int32_t num_ks;       /* 0: any k >= 1; else the first num_ks entries of ks */
  int32_t ks[MLA_PLUGIN_MAX_KS];
  int64_t max_n;        /* the longest row it takes; 0: any */
  uint32_t index_base;  /* MLA_PLUGIN_INDEX_ABSOLUTE or _RELATIVE */
  uint32_t sorted;      /* 0, or 1: the selection comes by descending logit (then held to it) */
  uint32_t logits_precision; /* MLA_PLUGIN_LOGITS_F32 or _BF16 */
  uint32_t range_all_valid;  /* 0: a row's range may hold masked (-inf) positions (canonical); 1: it
                                claims only rows whose every position in range is finite, as where
                                the range is the causal horizon (V3.2's sparse attention): a kernel
                                that fills a short selection with in-range positions, masked or not */
  mla_plugin_topk_fn topk; /* required */
  /* ---- 1.6 (read only when struct_size covers it) ---- */
  mla_plugin_topk_can_implement_fn can_implement; /* optional, may be NULL */
} mla_plugin_topk_entry;

/* ---- 1.5: the V3.2 lightning indexer's logits ---------------------------------------------------
 *
 *   logits[r, p] = k_scale[p] * sum_h weights[r, h] * relu(q8[r, h] . k8[p])
 *
 * q8 and k8 the e4m3 values of the codes, 128 per head and per key; q carries no scale of its own
 * (V3.2 folds q's per-head scale into the weights, as DeepGEMM's API expects). Two layouts:
 *  - PAGED (fp8_paged_mqa_logits, a decode step): q [batch, next_n, heads, 128], the keys in the
 *    paged 132-byte indexer cache [num_blocks, block_size * 132]: within a block, every token's 128
 *    codes first, then every token's float32 scale; context_lens [batch], block_table
 *    [batch, max_blocks]. Row r = b * next_n + i sees positions [0, ctx_b - next_n + i + 1).
 *    Logits [batch * next_n, max_context].
 *  - RAGGED (fp8_mqa_logits, a prefill): q [rows, heads, 128], keys k_codes [num_keys, 128] with
 *    float32 k_scales [num_keys]; row r sees [ks[r], ke[r]) (empty when ke <= ks). Logits
 *    [rows, num_keys].
 * Every logit outside its row's range is -inf (DeepGEMM's clean_logits=True), every one inside is
 * finite; a block-table entry or a key no row reads may hold anything and is never to be read. */

#define MLA_PLUGIN_INDEXER_PAGED 0x1u  /* fp8_paged_mqa_logits */
#define MLA_PLUGIN_INDEXER_RAGGED 0x2u /* fp8_mqa_logits */

#define MLA_PLUGIN_NEXT_N_1 0x1u /* paged calls with one query token per sequence */
#define MLA_PLUGIN_NEXT_N_2 0x2u /* and with two (a speculative step) */

#define MLA_PLUGIN_MAX_HEAD_COUNTS 16

typedef struct mla_plugin_indexer_logits_args {
  uint32_t struct_size; /* sizeof(mla_plugin_indexer_logits_args) as the host compiled it */
  uint32_t layout;      /* one MLA_PLUGIN_INDEXER_* bit of the entry's layouts */
  int64_t batch;        /* paged: sequences; ragged: query rows */
  int32_t next_n;       /* paged: 1 or 2; ragged: 1 */
  int32_t heads;        /* index heads (V3.2: 64) */
  int64_t rows, cols;   /* the logits' shape: batch * next_n x max_context, or rows x num_keys */
  /* paged (zero / NULL for ragged) */
  int64_t num_blocks, block_size, max_blocks, max_context;
  const uint8_t* kv_cache;      /* [num_blocks, block_size * 132] */
  const int32_t* context_lens;  /* [batch] */
  const int32_t* block_table;   /* [batch, max_blocks] */
  /* ragged (zero / NULL for paged) */
  int64_t num_keys;
  const uint8_t* k_codes;  /* [num_keys, 128] e4m3 */
  const float* k_scales;   /* [num_keys] */
  const int32_t* ks;       /* [rows] */
  const int32_t* ke;       /* [rows] */
  /* both */
  const uint8_t* q;        /* [rows, heads, 128] e4m3 codes */
  const float* weights;    /* [rows, heads], q's scales folded in */
  float* logits;           /* [rows, cols]: write every element */
  void* stream;            /* as in mla_plugin_decode_args */
} mla_plugin_indexer_logits_args;

typedef int32_t (*mla_plugin_indexer_logits_fn)(const mla_plugin_indexer_logits_args* args, char* error,
                                                size_t error_size);

/* Optional (1.6): whether the indexer logits implement the call `shape` describes (data NULL;
 * context_lens given for a paged call, ks and ke for a ragged one). */
typedef int32_t (*mla_plugin_indexer_logits_can_implement_fn)(const mla_plugin_indexer_logits_args* shape,
                                                              char* reason, size_t reason_size);

/* The indexer logits entry (1.5): its own implementation in the certificate. */
typedef struct mla_plugin_indexer_logits_entry {
  uint32_t struct_size; /* sizeof(mla_plugin_indexer_logits_entry) as the plug-in compiled it */
  const char* name;     /* [a-z0-9_]+, unlike every other entry's */
  const char* description;
  uint32_t layouts;     /* MLA_PLUGIN_INDEXER_* bits, at least one */
  uint32_t next_ns;     /* MLA_PLUGIN_NEXT_N_* bits for paged calls; 0: both */
  int32_t num_heads;    /* 0: any head count; else the first num_heads entries of heads */
  int32_t heads[MLA_PLUGIN_MAX_HEAD_COUNTS];
  int32_t num_block_sizes; /* 0: any block size; else the first num_block_sizes entries */
  int32_t block_sizes[MLA_PLUGIN_MAX_PAGE_SIZES];
  int64_t max_context;  /* the widest logits row it takes; 0: any */
  mla_plugin_indexer_logits_fn indexer_logits; /* required */
  /* ---- 1.6 (read only when struct_size covers it) ---- */
  mla_plugin_indexer_logits_can_implement_fn can_implement; /* optional, may be NULL */
} mla_plugin_indexer_logits_entry;

/* ---- 1.5: the V3.2 indexer's keys into their paged 132-byte cache ------------------------------
 *
 * keys bf16 [num_tokens, 128] (already normalized, rotated and Hadamard'd upstream: the append only
 * quantizes and stores), slot_mapping int64 [num_tokens] (slot = block * block_size + offset; a
 * slot < 0 skips its token), kv_cache [num_blocks, block_size * 132] written in place: within each
 * block all its tokens' 128 e4m3 codes first, then all their float32 scales. Per token amax =
 * max|k|, s = max(amax, 1e-4) / 448 in float32 (ue8m0: the smallest power of two >= s), codes =
 * e4m3(k / s) rounded to nearest even, saturated to +-448. Every byte of the cache the call's
 * tokens do not own must keep its prior value. */

/* How the float32 scale divides amax by 448 (the entry's fp32_scale_op). */
#define MLA_PLUGIN_INDEXER_SCALE_DIVIDE 0u           /* max(amax, 1e-4) / 448: vLLM's write */
#define MLA_PLUGIN_INDEXER_SCALE_TIMES_RECIPROCAL 1u /* max(amax, 1e-4) * float32(1/448): DeepSeek's act_quant */

typedef struct mla_plugin_indexer_append_args {
  uint32_t struct_size;   /* sizeof(mla_plugin_indexer_append_args) as the host compiled it */
  uint32_t scale_fmt;     /* MLA_PLUGIN_SCALE_FP32 or MLA_PLUGIN_SCALE_UE8M0, one of the entry's */
  int64_t num_tokens, num_blocks, block_size;
  const uint16_t* keys;         /* [num_tokens, 128] bf16 bits */
  const int64_t* slot_mapping;  /* [num_tokens] */
  uint8_t* kv_cache;            /* [num_blocks, block_size * 132], in place */
  void* stream;                 /* as in mla_plugin_decode_args */
} mla_plugin_indexer_append_args;

typedef int32_t (*mla_plugin_indexer_append_fn)(const mla_plugin_indexer_append_args* args, char* error,
                                                size_t error_size);

/* Optional (1.6): whether the indexer append implements the call `shape` describes (every pointer NULL). */
typedef int32_t (*mla_plugin_indexer_append_can_implement_fn)(const mla_plugin_indexer_append_args* shape,
                                                              char* reason, size_t reason_size);

/* The indexer append entry (1.5): its own implementation in the certificate. */
typedef struct mla_plugin_indexer_append_entry {
  uint32_t struct_size; /* sizeof(mla_plugin_indexer_append_entry) as the plug-in compiled it */
  const char* name;     /* [a-z0-9_]+, unlike every other entry's */
  const char* description;
  uint32_t scale_fmts;  /* MLA_PLUGIN_SCALE_* bits it writes, at least one */
  uint32_t fp32_scale_op; /* MLA_PLUGIN_INDEXER_SCALE_DIVIDE or _TIMES_RECIPROCAL */
  int32_t num_block_sizes; /* 0: any block size; else the first num_block_sizes entries */
  int32_t block_sizes[MLA_PLUGIN_MAX_PAGE_SIZES];
  mla_plugin_indexer_append_fn indexer_append; /* required */
  /* ---- 1.6 (read only when struct_size covers it) ---- */
  mla_plugin_indexer_append_can_implement_fn can_implement; /* optional, may be NULL */
} mla_plugin_indexer_append_entry;

/* ---- 1.5: FlashMLA's sparse prefill (flash_mla_sparse_fwd) ----------------------------------------
 *
 * q [s_q, heads, d_qk] bf16, kv [s_kv, d_qk] bf16 (one latent head), indices [s_q, topk] int32:
 * entry j of row i is a key when 0 <= idx < s_kv and, with topk_length, j < topk_length[i]; any
 * other value (-1, INT32_MIN, s_kv, INT32_MAX ...) is none, skipped. Scores over all d_qk dims
 * times softmax_scale; V the first d_v (512) columns of the same rows. Writes out [s_q, heads,
 * d_v], max_logits [s_q, heads] (-inf: no key) and lse [s_q, heads] (natural log, +inf: no key);
 * with attn_sink [heads], out shrinks by 1 / (1 + exp(sink - lse)) and lse stays the keys'. A row
 * with no key: out 0. No conventions to declare: these are FlashMLA's. */

#define MLA_PLUGIN_SPARSE_DQK_576 0x1u /* latent 512 and rope 64 */
#define MLA_PLUGIN_SPARSE_DQK_512 0x2u /* latent only */

typedef struct mla_plugin_sparse_prefill_args {
  uint32_t struct_size; /* sizeof(mla_plugin_sparse_prefill_args) as the host compiled it */
  int64_t s_q, s_kv;
  int32_t heads, d_qk, d_v, topk;
  double softmax_scale;
  const uint16_t* q;           /* [s_q, heads, d_qk] bf16 bits */
  const uint16_t* kv;          /* [s_kv, d_qk] bf16 bits */
  const int32_t* indices;      /* [s_q, topk] */
  const float* attn_sink;      /* [heads], or NULL */
  const int32_t* topk_length;  /* [s_q], or NULL */
  void* out;                   /* [s_q, heads, d_v]: float32, or bf16 bits, per out_dtype: write every element */
  float* max_logits;           /* [s_q, heads]: write every element */
  float* lse;                  /* [s_q, heads]: write every element */
  void* stream;                /* as in mla_plugin_decode_args */
} mla_plugin_sparse_prefill_args;

typedef int32_t (*mla_plugin_sparse_prefill_fn)(const mla_plugin_sparse_prefill_args* args, char* error,
                                                size_t error_size);

/* Optional (1.6): whether the sparse prefill implements the call `shape` describes (data pointers
 * NULL; topk_length given when the call has one; attn_sink, when it has one, pointing at zeros). */
typedef int32_t (*mla_plugin_sparse_prefill_can_implement_fn)(const mla_plugin_sparse_prefill_args* shape,
                                                              char* reason, size_t reason_size);

/* The sparse prefill entry (1.5): its own implementation in the certificate. */
typedef struct mla_plugin_sparse_prefill_entry {
  uint32_t struct_size; /* sizeof(mla_plugin_sparse_prefill_entry) as the plug-in compiled it */
  const char* name;     /* [a-z0-9_]+, unlike every other entry's */
  const char* description;
  int32_t out_dtype;    /* MLA_PLUGIN_OUT_F32 or MLA_PLUGIN_OUT_BF16 */
  uint32_t operand_precision; /* MLA_PLUGIN_PRECISION_*; UNDECLARED in both or in neither */
  uint32_t accum_precision;
  int32_t num_heads;    /* 0: any head count; else the first num_heads entries (FlashMLA: 64, 128) */
  int32_t heads[MLA_PLUGIN_MAX_HEAD_COUNTS];
  int32_t topk_multiple; /* >= 1: topk must be a multiple of it (FlashMLA: 64 or 128) */
  uint32_t d_qks;       /* MLA_PLUGIN_SPARSE_DQK_* bits; 0: both */
  uint32_t takes_sink;        /* 0 or 1 */
  uint32_t takes_topk_length; /* 0 or 1 */
  mla_plugin_sparse_prefill_fn sparse_prefill; /* required */
  /* ---- 1.6 (read only when struct_size covers it) ---- */
  mla_plugin_sparse_prefill_can_implement_fn can_implement; /* optional, may be NULL */
} mla_plugin_sparse_prefill_entry;

/* Returns MLA_PLUGIN_OK, or another code with a NUL-terminated message in error[0..error_size). */
typedef int32_t (*mla_plugin_decode_fn)(const mla_plugin_decode_args* args, char* error, size_t error_size);

/* Returns MLA_PLUGIN_OK, MLA_PLUGIN_CAPACITY (nothing written) or another code with a message. */
typedef int32_t (*mla_plugin_append_fn)(const mla_plugin_append_args* args, char* error, size_t error_size);

/* Optional: NULL when the plug-in can run here, else why not (e.g. "no CUDA device"); the host
 * then records every case as SKIPPED with that reason. */
typedef const char* (*mla_plugin_unavailable_fn)(void);

/* Optional (1.2): whether decode implements `shape`, which already lies inside the capabilities.
 * Returns MLA_PLUGIN_OK, or MLA_PLUGIN_UNSUPPORTED with a NUL-terminated reason in
 * reason[0..reason_size) (e.g. "dense needs the bf16 cache"): the shape is then not claimed, with
 * that reason, and never counted against the kernel. Any other code is an error of the kernel.
 * Pure: no state, the same answer every time; called before any data exists. */
typedef int32_t (*mla_plugin_can_implement_fn)(const mla_plugin_shape* shape, char* reason, size_t reason_size);

typedef struct mla_plugin_descriptor {
  uint32_t abi_version; /* MLA_PLUGIN_ABI_VERSION the plug-in was compiled against */
  uint32_t struct_size; /* sizeof(mla_plugin_descriptor) as the plug-in compiled it */
  const char* name;     /* [a-z0-9_]+, unique among the kernels certified together */
  const char* version;  /* free text, e.g. "1.4.2+abc123"; part of the --resume identity */
  const char* description; /* one line */
  const char* backend;  /* "cpu" or "cuda" */
  int32_t out_dtype;    /* MLA_PLUGIN_OUT_F32 or MLA_PLUGIN_OUT_BF16 */
  mla_plugin_capabilities caps;
  mla_plugin_decode_fn decode;           /* required, unless a 1.4 or 1.5 entry is given */
  mla_plugin_unavailable_fn unavailable; /* optional, may be NULL */
  /* ---- 1.1 (read only when struct_size covers them) ---- */
  uint32_t abi_minor;         /* MLA_PLUGIN_ABI_MINOR the plug-in was compiled against */
  uint32_t flags;             /* MLA_PLUGIN_FLAG_* bits */
  uint32_t append_formats;    /* MLA_PLUGIN_CACHE_* bits append can write; 0 iff append is NULL */
  uint32_t append_scale_fmts; /* MLA_PLUGIN_SCALE_* bits; non-zero iff append_formats has FP8 */
  mla_plugin_append_fn append; /* optional, may be NULL */
  /* ---- 1.2 (read only when struct_size covers them; zero: the 1.1 meaning) ---- */
  uint32_t lse_base;           /* MLA_PLUGIN_LSE_BASE_E or MLA_PLUGIN_LSE_BASE_2 */
  uint32_t lse_layout;         /* MLA_PLUGIN_LSE_B_H_SQ or MLA_PLUGIN_LSE_B_SQ_H */
  uint32_t empty_row_lse;      /* MLA_PLUGIN_EMPTY_LSE_POS_INF or MLA_PLUGIN_EMPTY_LSE_NEG_INF */
  uint32_t index_numbering;    /* MLA_PLUGIN_INDEX_POSITIONS or MLA_PLUGIN_INDEX_GLOBAL_SLOTS */
  uint32_t operand_precision;  /* MLA_PLUGIN_PRECISION_*; UNDECLARED in both or in neither */
  uint32_t accum_precision;    /* MLA_PLUGIN_PRECISION_FP64 or _FP32 (or UNDECLARED) */
  uint32_t append_fp8_recipes; /* MLA_PLUGIN_RECIPE_* bits the append can write; 0: DeepSeek's only
                                  (1.1's meaning); non-zero only when append_formats has FP8 */
  uint32_t reserved_1_2;       /* 0 */
  mla_plugin_can_implement_fn can_implement; /* optional, may be NULL */
  /* ---- 1.4 (read only when struct_size covers them; NULL: no such entry) ---- */
  const mla_plugin_prefill_entry* prefill; /* optional; valid while the library is loaded */
  const mla_plugin_merge_entry* merge;     /* optional; valid while the library is loaded */
  const mla_plugin_topk_entry* topk;       /* optional; valid while the library is loaded */
  /* ---- 1.5 (read only when struct_size covers it; NULL: no such entry) ---- */
  const mla_plugin_indexer_logits_entry* indexer_logits; /* optional; valid while the library is loaded */
  const mla_plugin_indexer_append_entry* indexer_append; /* optional; valid while the library is loaded */
  const mla_plugin_sparse_prefill_entry* sparse_prefill; /* optional; valid while the library is loaded */
} mla_plugin_descriptor;

/* Whether a struct whose struct_size is `size` contains `field` entirely. */
#define MLA_PLUGIN_HAS_FIELD(type, field, size) \
  ((size_t)(size) >= offsetof(type, field) + sizeof(((type*)0)->field))
/* The descriptor of revision 1.0 ended after `unavailable`, that of 1.1 after `append`. */
#define MLA_PLUGIN_DESCRIPTOR_V1_0_SIZE \
  (offsetof(mla_plugin_descriptor, unavailable) + sizeof(mla_plugin_unavailable_fn))
#define MLA_PLUGIN_DESCRIPTOR_V1_1_SIZE (offsetof(mla_plugin_descriptor, append) + sizeof(mla_plugin_append_fn))
/* The prefill entry of revision 1.4 ends after `prefill`: the floor a host accepts. */
#define MLA_PLUGIN_PREFILL_ENTRY_V1_4_SIZE \
  (offsetof(mla_plugin_prefill_entry, prefill) + sizeof(mla_plugin_prefill_fn))
#define MLA_PLUGIN_MERGE_ENTRY_V1_4_SIZE (offsetof(mla_plugin_merge_entry, merge) + sizeof(mla_plugin_merge_fn))
#define MLA_PLUGIN_TOPK_ENTRY_V1_4_SIZE (offsetof(mla_plugin_topk_entry, topk) + sizeof(mla_plugin_topk_fn))
#define MLA_PLUGIN_INDEXER_LOGITS_ENTRY_V1_5_SIZE \
  (offsetof(mla_plugin_indexer_logits_entry, indexer_logits) + sizeof(mla_plugin_indexer_logits_fn))
#define MLA_PLUGIN_SPARSE_PREFILL_ENTRY_V1_5_SIZE \
  (offsetof(mla_plugin_sparse_prefill_entry, sparse_prefill) + sizeof(mla_plugin_sparse_prefill_fn))
#define MLA_PLUGIN_INDEXER_APPEND_ENTRY_V1_5_SIZE \
  (offsetof(mla_plugin_indexer_append_entry, indexer_append) + sizeof(mla_plugin_indexer_append_fn))

/* The one exported symbol. `host_abi_version` is the host's MLA_PLUGIN_ABI_VERSION; a plug-in
 * that cannot serve it returns NULL. The descriptor must stay valid while the library is loaded. */
typedef const mla_plugin_descriptor* (*mla_plugin_get_descriptor_fn)(uint32_t host_abi_version);

#if defined(__GNUC__)
#define MLA_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define MLA_PLUGIN_EXPORT
#endif

MLA_PLUGIN_EXPORT const mla_plugin_descriptor* mla_plugin_get_descriptor(uint32_t host_abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MLA_PLUGIN_H */
