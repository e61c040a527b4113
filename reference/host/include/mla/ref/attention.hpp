// The attention core of MLA decode in float64 over the contract of mla/core/attention.hpp
// (absorbed bf16 query, paged latent cache in bf16 or the 656-byte FP8 layout, block table,
// per-sequence lengths, optional sparse top-k indices).
//
// This is the truth the CPU kernels and the goldens' `truth/*` are held to, so it is written for
// exactness and for never touching memory a sequence does not own: a block-table entry or
// cache slot outside [0, L) of a sequence is never read (the goldens poison them with NaN and
// sentinel block ids), and an index that is invalid (< 0 or >= L) is skipped, never clamped.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mla/core/attention.hpp"

namespace mla::ref {

inline constexpr int kDqk = 576;
inline constexpr int kDv = 512;

// Read access to the paged cache by logical position; reads only the block-table entry and the
// slot of the requested token.
class PagedCache {
 public:
  explicit PagedCache(const AttnInputs& in);  // mla::validate_attention_inputs(in)
  int64_t seqlen(int64_t b) const { return in_->cache_seqlens[static_cast<std::size_t>(b)]; }
  // Token `t` (0 <= t < seqlen(b)) of sequence `b` as 576 exact values (fp8: dequantized).
  // Throws mla::Error when t is out of range or the block id is outside [0, num_blocks).
  void token(int64_t b, int64_t t, double* out) const;
  void token(int64_t b, int64_t t, float* out) const;  // bf16 exact; fp8 rounded to float
  // Asks the CPU to start loading token `t`'s bytes (a software prefetch: the cache's pages are
  // scattered, so a hardware stream prefetcher stops at each of them); reads nothing itself and
  // does nothing for a token or block id that token() would refuse.
  void prefetch(int64_t b, int64_t t) const;
  const AttnInputs& inputs() const { return *in_; }

 private:
  const uint8_t* slot(int64_t b, int64_t t) const;
  const AttnInputs* in_;
};

struct AttnResult {
  std::vector<double> out;  // [b, s_q, h, 512]
  std::vector<double> lse;  // [b, h, s_q], natural log; +inf where a row attends nothing
};

// The attention in float64: scores = scale·(q·k) over all 576 dims, softmax, out = P·c (the 512
// latent dims); online softmax over chunks of at most 1024 tokens in the tokens' logical order,
// a sequence cut into split-KV segments of 256 to 4096 tokens merged in order (the length is
// halved from 4096 until the call has 16 tasks, from the shape alone), so the result depends
// neither on the physical page layout nor on the batch order (bitwise). Runs on mla::threads()
// threads (a sequence's rows, or one segment of them, per task, handed to whichever worker is
// free: the cut is fixed by the shape, so the bits do not depend on the thread count either)
// with the products built for the CPU's ISA (mla/ref/gemm.hpp).
AttnResult attention_fp64(const AttnInputs& in);

// The buffers of one call besides its result, for a caller that repeats calls (a prepared
// kernel, a benchmark): kept between calls so that a repeat maps and zeroes no new pages.
class AttentionScratch {
 public:
  AttentionScratch();
  ~AttentionScratch();
  AttentionScratch(AttentionScratch&&) noexcept;
  AttentionScratch& operator=(AttentionScratch&&) noexcept;
  struct Impl;

 private:
  friend void attention_fp64(const AttnInputs& in, AttnResult& res, AttentionScratch& scratch);
  std::unique_ptr<Impl> impl_;
};

// The same attention into `res` (resized; its storage reused when the shape repeats), with
// `scratch`'s buffers: the bits are those of attention_fp64(in).
void attention_fp64(const AttnInputs& in, AttnResult& res, AttentionScratch& scratch);

}  // namespace mla::ref
