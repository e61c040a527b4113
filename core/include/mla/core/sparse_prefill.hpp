// The sparse prefill contract: FlashMLA's flash_mla_sparse_fwd, the attention DeepSeek-V3.2 runs
// during prefill over each query token's top-k key positions, in the absorbed form (one latent
// key/value head shared by every query head), as the reference's mla_ref/sparse_prefill.py
// computes it:
//
//   q [s_q, h, d_qk] bf16, kv [s_kv, d_qk] bf16 (FlashMLA's [s_kv, 1, d_qk]), indices [s_q, topk]
//   int32 (its [s_q, 1, topk]), sm_scale, d_v = 512; optional attn_sink [h] float32 (one logit per
//   head that takes probability mass without a value) and topk_length [s_q] int32
//   -> out [s_q, h, d_v], max_logits [s_q, h] float32, lse [s_q, h] float32 (natural log).
//
// No batch dimension: a prefill's tokens are the rows of one call. Entry j of row i is a key when
// 0 <= idx < s_kv and, with topk_length, j < topk_length[i]; every other value (-1, any negative
// down to INT32_MIN, s_kv and past it up to INT32_MAX, an entry past the row's topk_length) is no
// key, skipped, never clamped. Scores s = sm_scale * q . kv[idx] over all d_qk columns (576: the
// latent 512 and the rope 64; FlashMLA also takes 512, no rope part); V = the first d_v columns of
// the same rows:
//   max_logits = max_j s_j                     (-inf when the row has no key)
//   lse        = ln sum_j exp(s_j)             (+inf when the row has no key)
//   out        = sum_j exp(s_j - lse_o) V_j,   lse_o = ln(exp(lse) + exp(attn_sink[h]))
// so a sink shrinks out by 1 / (1 + exp(sink - lse)) and leaves lse and max_logits those of the
// keys alone. A row with no key: out 0, max_logits -inf, lse +inf, whatever the sink.
//
// A valid position listed twice in one row would be attended twice (FlashMLA's reference gathers
// so); the suite's cases never list one twice and validation refuses it, as for sparse decode.
//
// The truth is the decode core's: a sparse prefill is one sparse decode call of batch 1, s_q rows,
// the kv rows as one contiguous cache, the invalid entries made -1 (sparse_prefill_as_decode), so
// the fp64 oracle and the deployed-precision reference are the decode ones (mla/ref/sparse_prefill.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mla/core/attention.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/precision.hpp"

namespace mla {

inline constexpr int kSparsePrefillDv = 512;

struct SparsePrefillShape {
  int64_t s_q = 0;   // query rows (the prefill's tokens)
  int64_t s_kv = 0;  // key rows
  int heads = 0;
  int d_qk = kMlaDqk;  // 576 (latent + rope) or 512
  int topk = 0;        // index entries per row
  bool sink = false;         // attn_sink given
  bool topk_length = false;  // topk_length given
};

struct SparsePrefillInputs {
  SparsePrefillShape shape;
  double sm_scale = 0;
  std::span<const uint16_t> q;             // [s_q, h, d_qk] bf16 bits
  std::span<const uint16_t> kv;            // [s_kv, d_qk] bf16 bits
  std::span<const int32_t> indices;        // [s_q, topk]
  std::span<const float> attn_sink;        // [h], empty without a sink
  std::span<const int32_t> topk_length;    // [s_q], empty without
};

struct SparsePrefillBuffers {
  SparsePrefillShape shape;
  double sm_scale = 0;
  std::vector<uint16_t> q, kv;
  std::vector<int32_t> indices;
  std::vector<float> attn_sink;
  std::vector<int32_t> topk_length;
  SparsePrefillBuffers() = default;
  explicit SparsePrefillBuffers(const SparsePrefillInputs& in);  // a private copy
  SparsePrefillInputs view() const;
};

// Results widened to double; `dtype` what the implementation wrote out in (max_logits and lse are
// float32 in every deployed kernel, f64 in the oracle's).
struct SparsePrefillOutputs {
  OutDType dtype = OutDType::f64;
  std::vector<double> out;         // [s_q, h, 512]
  std::vector<double> max_logits;  // [s_q, h], -inf for a row with no key
  std::vector<double> lse;         // [s_q, h], natural log, +inf for a row with no key
};

// Whether entry j of row i is a key (the header's rule).
bool sparse_prefill_key(const SparsePrefillInputs& in, int64_t i, int64_t j);

// d_qk 576 or 512, s_q, s_kv >= 0, heads >= 1, topk >= 1, a finite positive sm_scale, every span
// of its shape's size (attn_sink and topk_length present exactly when the shape says so), no NaN
// or infinity in q, kv or attn_sink, topk_length in [0, topk], and no valid position twice in a
// row. Throws mla::Error naming the field and the position, prefixed with `who`.
void validate_sparse_prefill_inputs(const SparsePrefillInputs& in, std::string_view who = {});

// The call as one sparse decode call (mla/core/attention.hpp): batch 1, s_q rows, one page of
// max(s_kv, 1) bf16 tokens (q and kv padded with zero rope columns when d_qk is 512, which adds
// nothing to any score), indices [1, s_q, topk] with every entry that is no key made -1, not
// causal. The sink is not part of it (sparse_prefill_apply_sink). Validates first; s_q must be
// at least 1 (a decode call has rows: a caller answers an empty call itself).
AttnBuffers sparse_prefill_as_decode(const SparsePrefillInputs& in);

// out *= 1 / (1 + exp(sink[h] - lse)) on every row with a key (the header's rule), in double.
void sparse_prefill_apply_sink(const SparsePrefillInputs& in, std::vector<double>& out, std::span<const double> lse_s_q_h);

// Compute-bound: flops = 2 * keys attended * h * (d_qk + 512); bytes = q, the kv rows the valid
// indices name (each row once per query row: the gather FlashMLA does), the indices, out in
// `out_dtype`, max_logits and lse in float32.
CostModel sparse_prefill_cost_model(const SparsePrefillInputs& in, OutDType out_dtype = OutDType::bf16);

struct SparsePrefillKernelInfo {
  std::string name, backend, description;
  KernelRole role = KernelRole::optimized;
  OutDType out_dtype = OutDType::bf16;
  std::optional<ComputePrecision> compute;  // nullopt: the class out_dtype implies
  std::vector<int> heads;      // the head counts it takes (FlashMLA: 64, 128); empty: any
  int topk_multiple = 1;       // topk must be a multiple of it (FlashMLA: 64 or 128)
  std::vector<int> d_qks;      // empty: 576 and 512
  bool sink = true;            // takes attn_sink
  bool topk_length = true;     // takes topk_length
};

class PreparedSparsePrefill {
 public:
  virtual ~PreparedSparsePrefill() = default;
  virtual void run() = 0;                        // timed; repeatable
  virtual SparsePrefillOutputs results() = 0;    // after the last run
  virtual void synchronize() {}
};

class SparsePrefillImpl {
 public:
  virtual ~SparsePrefillImpl() = default;
  virtual const SparsePrefillKernelInfo& info() const = 0;
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  // Default: heads, topk multiple, d_qk, sink and topk_length against its claims.
  virtual std::optional<std::string> check(const SparsePrefillShape& s) const;
  virtual CostModel cost(const SparsePrefillInputs& in) const { return sparse_prefill_cost_model(in, info().out_dtype); }
  // Validates and copies.
  virtual std::unique_ptr<PreparedSparsePrefill> prepare(const SparsePrefillInputs& in) const = 0;
};

}  // namespace mla
