// DeepSeek MLA layer configuration: the fields of upstream `ModelArgs` that MLA uses.
#pragma once

#include <cstdint>
#include <string>

namespace mla {

struct ModelConfig {
  std::string preset;
  int64_t dim = 0;
  int64_t n_heads = 0;
  int64_t q_lora_rank = 0;  // 0: single `wq` projection
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  int64_t max_seq_len = 16384;
  int64_t original_seq_len = 4096;
  double rope_theta = 10000.0;
  double rope_factor = 40.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  int64_t max_batch_size = 8;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // YaRN (frequency correction and the mscale² softmax factor) is on iff this holds.
  bool yarn() const { return max_seq_len > original_seq_len; }
};

// The softmax scale of the layer: (nope+rope)^-0.5, times (0.1·mscale·ln(rope_factor) + 1)²
// under YaRN (docs/field.md, "Upstream semantics": 0.1352337789 for V3's mscale 1.0). The one
// C++ definition: the reference layer, the workloads and the tools all call it. Throws
// mla::Error on a non-positive head dimension or rope_factor.
double softmax_scale(const ModelConfig& cfg);

}  // namespace mla
