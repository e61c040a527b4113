// The attention core of MLA decode in float64: the kernel interface of
// kernels/include/mla/kernels/attention.hpp (absorbed bf16 query, paged latent cache in bf16 or
// the 656-byte FP8 layout, block table, per-sequence lengths, optional sparse top-k indices).
//
// This is the truth the CPU kernels and the goldens' `truth/*` are held to, so it is written for
// exactness and for never touching memory a sequence does not own: a block-table entry or
// cache slot outside [0, L) of a sequence is never read (the goldens poison them with NaN and
// sentinel block ids), and an index that is invalid (< 0 or >= L) is skipped, never clamped.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mla/kernels/attention.hpp"

namespace mla::ref {

inline constexpr int kDqk = 576;
inline constexpr int kDv = 512;

// Bytes of one cache token: 576·2 (bf16) or 656 (fp8).
std::size_t token_bytes(CacheFormat f);

// Checks every span size against `in.shape`, the shape itself (d_qk 576, d_v 512, positive
// dims), 0 <= cache_seqlens[i] <= max_blocks·page_size, a finite softmax scale, and — for sparse
// inputs — that the valid indices of each row are distinct. Block ids are checked when read.
// Throws mla::UnsupportedError for d_qk/d_v other than 576/512, mla::Error otherwise, with the
// offending field and values in the message.
void validate_attention_inputs(const AttnInputs& in);

// Read access to the paged cache by logical position; reads only the block-table entry and the
// slot of the requested token.
class PagedCache {
 public:
  explicit PagedCache(const AttnInputs& in);  // validate_attention_inputs(in)
  int64_t seqlen(int64_t b) const { return in_->cache_seqlens[static_cast<std::size_t>(b)]; }
  // Token `t` (0 <= t < seqlen(b)) of sequence `b` as 576 exact values (fp8: dequantized).
  // Throws mla::Error when t is out of range or the block id is outside [0, num_blocks).
  void token(int64_t b, int64_t t, double* out) const;
  void token(int64_t b, int64_t t, float* out) const;  // bf16 exact; fp8 rounded to float
  const AttnInputs& inputs() const { return *in_; }

 private:
  const uint8_t* slot(int64_t b, int64_t t) const;
  const AttnInputs* in_;
};

// The valid indices of sparse row (b, s), ascending: 0 <= idx < seqlen(b).
std::vector<int64_t> sparse_row_positions(const AttnInputs& in, int64_t b, int64_t s);

// Dense: the last position query `s` (of s_q) may attend, or -1 when none:
// causal: L - s_q + s (clamped to L-1); non-causal: L-1.
int64_t dense_last_position(const AttnShape& shape, int64_t L, int64_t s);

struct AttnResult {
  std::vector<double> out;  // [b, s_q, h, 512]
  std::vector<double> lse;  // [b, h, s_q], natural log; +inf where a row attends nothing
};

struct AttnOptions {
  // Fault injection for the certifier's self-tests (kernels/perturbed.hpp) and nothing else:
  // the last `drop_trailing_tokens` tokens of every sequence are treated as absent (dense: no
  // query sees them; sparse: indices pointing at them are skipped). 0 in every real use.
  int64_t drop_trailing_tokens = 0;
};

// The attention in float64: scores = scale·(q·k) over all 576 dims, softmax, out = P·c (the 512
// latent dims); online softmax over chunks of 1024 tokens in the tokens' logical order, so the
// result depends neither on the physical page layout nor on the batch order (bitwise).
AttnResult attention_fp64(const AttnInputs& in, const AttnOptions& opt = {});

}  // namespace mla::ref
