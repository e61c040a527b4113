// The whole DeepSeek MLA layer (upstream `inference/model.py`, class MLA) in float64, in both of
// its forms, with the state (caches) that makes decode steps depend on earlier steps.
//
// naive:    per-head K = [W_UK·c | k_pe], V = W_UV·c cached as k_cache/v_cache.
// absorbed: q_nope·W_UK taken into the latent space, scores = q_lat·c + q_pe·k_pe over
//           kv_cache/pe_cache, out = (P·c)·W_UVᵀ.
// In exact arithmetic the two forms are equal; in float64 they agree to ~1e-14 absolute (1e-12
// relative on the smallest elements), which is what lets either one localize a bug found in
// the other.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Dense>

#include "mla/core/config.hpp"

namespace mla::ref {

using MatrixRM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A C-order float64 array (the golden layout), the currency of inputs and results.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape_);  // zero-filled
  Tensor(std::vector<int64_t> shape_, std::vector<double> data_);  // throws on a size mismatch
  int64_t numel() const;
};

// Throws mla::Error naming the first field that makes `cfg` unusable for an MLA layer.
void validate_config(const ModelConfig& cfg);

// Weights in torch `Linear` orientation ([out, in]), names as fixtures/SCHEMA.md.
struct LayerWeights {
  MatrixRM wq;     // [h·(nope+rope), dim]      when q_lora_rank == 0
  MatrixRM wq_a;   // [q_lora_rank, dim]        when q_lora_rank > 0
  Eigen::VectorXd q_norm;  // [q_lora_rank]
  MatrixRM wq_b;   // [h·(nope+rope), q_lora_rank]
  MatrixRM wkv_a;  // [kv_lora_rank + rope, dim]
  Eigen::VectorXd kv_norm;  // [kv_lora_rank]
  MatrixRM wkv_b;  // [h·(nope+v), kv_lora_rank]; per head rows [W_UK (nope) ; W_UV (v)]
  MatrixRM wo;     // [dim, h·v]

  // The weight names `cfg` needs, and the shape of each.
  static std::vector<std::string> names(const ModelConfig& cfg);
  static std::vector<int64_t> expected_shape(const ModelConfig& cfg, std::string_view name);
  // Sets one weight from a C-order array; throws mla::Error on a name `cfg` does not use or a
  // shape other than expected_shape.
  void set(const ModelConfig& cfg, std::string_view name, std::span<const int64_t> shape,
           std::span<const double> data);
  // Throws mla::Error naming the first weight that is missing or misshapen.
  void validate(const ModelConfig& cfg) const;
};

enum class Form { naive, absorbed };
const char* to_string(Form f);

struct StepResult {
  Tensor out;  // [b, s, dim]
  // fixtures/SCHEMA.md names: q_nope, q_pe, kv_normed, k_pe, scores, probs, and
  // q_absorbed + latent_out (absorbed) or attn_out (naive).
  std::map<std::string, Tensor> intermediates;
};

class MlaLayer {
 public:
  // Validates the config and the weights (mla::Error).
  MlaLayer(const ModelConfig& cfg, LayerWeights weights, Form form);

  // One step: x is [b, s, dim] with b <= max_batch_size. Writes the caches at
  // [start_pos, start_pos+s) for rows [0, b) and attends over [0, start_pos+s).
  // Throws mla::CapacityError when start_pos + s > max_seq_len (upstream has no sliding window),
  // mla::Error when s > 1 and start_pos != 0 (upstream's mask is s×s) or a shape is wrong.
  // A failed step leaves the caches untouched.
  StepResult forward(std::span<const int64_t> x_shape, std::span<const double> x, int64_t start_pos,
                     bool keep_intermediates = true);
  StepResult forward(const Tensor& x, int64_t start_pos, bool keep_intermediates = true) {
    return forward(x.shape, x.data, start_pos, keep_intermediates);
  }

  // Cache contents [:batch, :end_pos] by SCHEMA name: naive k_cache [b,T,h,nope+rope],
  // v_cache [b,T,h,v]; absorbed kv_cache [b,T,kv_lora_rank], pe_cache [b,T,rope]. Positions
  // never written read as 0, as upstream's zero-initialised buffers do.
  std::map<std::string, Tensor> caches(int64_t batch, int64_t end_pos) const;

  const ModelConfig& config() const { return cfg_; }
  Form form() const { return form_; }
  double softmax_scale() const { return scale_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }

 private:
  // Cache rows are allocated on demand (doubling, capped at max_seq_len): the full upstream
  // buffer for a real config (8 × 16384 × 128 heads × 320 doubles) would not fit in memory,
  // while the capacity rule is still judged against max_seq_len.
  void reserve_rows(int64_t batch, int64_t rows);
  void step_one(int64_t bi, const double* x, int64_t s, int64_t start_pos, double* out,
                StepResult* res);

  ModelConfig cfg_;
  LayerWeights w_;
  Form form_;
  double scale_ = 0;
  std::vector<double> inv_freq_;
  // naive: a_ = k_cache [T, h·(nope+rope)], b_ = v_cache [T, h·v]
  // absorbed: a_ = kv_cache [T, kv_lora_rank], b_ = pe_cache [T, rope]
  std::vector<MatrixRM> a_, b_;
};

}  // namespace mla::ref
