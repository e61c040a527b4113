#include "mla/ref/layer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/ref/rope.hpp"

namespace mla::ref {

namespace {

constexpr double kRmsEps = 1e-6;  // upstream RMSNorm eps (a model constant, not a tolerance)

using StridedMap = Eigen::Map<const MatrixRM, 0, Eigen::OuterStride<>>;

int64_t product(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error(fmt::format("negative dimension in shape [{}]", fmt::join(shape, ", ")));
    n *= d;
  }
  return n;
}

void rms_norm_rows(MatrixRM& m, const Eigen::VectorXd& w) {
  const double n = static_cast<double>(m.cols());
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    const double inv = 1.0 / std::sqrt(m.row(i).squaredNorm() / n + kRmsEps);
    m.row(i) = (m.row(i) * inv).cwiseProduct(w.transpose());
  }
}

void softmax_rows(MatrixRM& s) {
  for (Eigen::Index i = 0; i < s.rows(); ++i) {
    const double mx = s.row(i).maxCoeff();
    s.row(i) = (s.row(i).array() - mx).exp();
    s.row(i) /= s.row(i).sum();
  }
}

// Copies an [s, n] block into Tensor [b, s, H, n] at (bi, :, hh, :).
void put_head(Tensor& t, int64_t bi, int64_t hh, const Eigen::Ref<const MatrixRM>& m) {
  const int64_t s = t.shape[1], H = t.shape[2], n = t.shape[3];
  for (int64_t i = 0; i < s; ++i) {
    double* dst = t.data.data() + ((bi * s + i) * H + hh) * n;
    for (int64_t j = 0; j < n; ++j) dst[j] = m(i, j);
  }
}

// Copies an [s, n] block into Tensor [b, s, n] at (bi, :, :).
void put_rows(Tensor& t, int64_t bi, const Eigen::Ref<const MatrixRM>& m) {
  const int64_t s = t.shape[1], n = t.shape[2];
  for (int64_t i = 0; i < s; ++i) {
    double* dst = t.data.data() + (bi * s + i) * n;
    for (int64_t j = 0; j < n; ++j) dst[j] = m(i, j);
  }
}

}  // namespace

Tensor::Tensor(std::vector<int64_t> shape_) : shape(std::move(shape_)) {
  data.assign(static_cast<std::size_t>(product(shape)), 0.0);
}

Tensor::Tensor(std::vector<int64_t> shape_, std::vector<double> data_)
    : shape(std::move(shape_)), data(std::move(data_)) {
  if (static_cast<int64_t>(data.size()) != product(shape)) {
    throw Error(fmt::format("tensor of shape [{}] given {} values", fmt::join(shape, ", "), data.size()));
  }
}

int64_t Tensor::numel() const { return product(shape); }

void validate_config(const ModelConfig& c) {
  auto positive = [](const char* name, int64_t v) {
    if (v <= 0) throw Error(fmt::format("ModelConfig.{}={} must be > 0", name, v));
  };
  positive("dim", c.dim);
  positive("n_heads", c.n_heads);
  positive("kv_lora_rank", c.kv_lora_rank);
  positive("qk_nope_head_dim", c.qk_nope_head_dim);
  positive("qk_rope_head_dim", c.qk_rope_head_dim);
  positive("v_head_dim", c.v_head_dim);
  positive("max_seq_len", c.max_seq_len);
  positive("max_batch_size", c.max_batch_size);
  if (c.q_lora_rank < 0) throw Error(fmt::format("ModelConfig.q_lora_rank={} must be >= 0", c.q_lora_rank));
  (void)rope_inv_freq(c);  // checks the rope fields
  if (!std::isfinite(mla::softmax_scale(c))) {
    throw Error(fmt::format("softmax scale is not finite (mscale={}, rope_factor={})", c.mscale, c.rope_factor));
  }
}

std::vector<std::string> LayerWeights::names(const ModelConfig& c) {
  std::vector<std::string> n;
  if (c.q_lora_rank == 0) {
    n = {"wq"};
  } else {
    n = {"wq_a", "q_norm", "wq_b"};
  }
  for (const char* s : {"wkv_a", "kv_norm", "wkv_b", "wo"}) n.emplace_back(s);
  return n;
}

std::vector<int64_t> LayerWeights::expected_shape(const ModelConfig& c, std::string_view name) {
  const int64_t h = c.n_heads, qk = c.qk_head_dim();
  if (name == "wq") return {h * qk, c.dim};
  if (name == "wq_a") return {c.q_lora_rank, c.dim};
  if (name == "q_norm") return {c.q_lora_rank};
  if (name == "wq_b") return {h * qk, c.q_lora_rank};
  if (name == "wkv_a") return {c.kv_lora_rank + c.qk_rope_head_dim, c.dim};
  if (name == "kv_norm") return {c.kv_lora_rank};
  if (name == "wkv_b") return {h * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank};
  if (name == "wo") return {c.dim, h * c.v_head_dim};
  throw Error(fmt::format("unknown MLA weight '{}'", name));
}

void LayerWeights::set(const ModelConfig& c, std::string_view name, std::span<const int64_t> shape,
                       std::span<const double> data) {
  const auto used = names(c);
  if (std::find(used.begin(), used.end(), name) == used.end()) {
    throw Error(fmt::format("weight '{}' is not used with q_lora_rank={}", name, c.q_lora_rank));
  }
  const auto want = expected_shape(c, name);
  if (!std::equal(want.begin(), want.end(), shape.begin(), shape.end())) {
    throw Error(fmt::format("weight '{}': expected shape [{}], got [{}]", name, fmt::join(want, ", "),
                            fmt::join(shape, ", ")));
  }
  if (static_cast<int64_t>(data.size()) != product(shape)) {
    throw Error(fmt::format("weight '{}': shape [{}] but {} values", name, fmt::join(shape, ", "), data.size()));
  }
  if (want.size() == 1) {
    Eigen::VectorXd v = Eigen::Map<const Eigen::VectorXd>(data.data(), want[0]);
    (name == "q_norm" ? q_norm : kv_norm) = std::move(v);
    return;
  }
  MatrixRM m = Eigen::Map<const MatrixRM>(data.data(), want[0], want[1]);
  if (name == "wq") wq = std::move(m);
  else if (name == "wq_a") wq_a = std::move(m);
  else if (name == "wq_b") wq_b = std::move(m);
  else if (name == "wkv_a") wkv_a = std::move(m);
  else if (name == "wkv_b") wkv_b = std::move(m);
  else wo = std::move(m);
}

void LayerWeights::validate(const ModelConfig& c) const {
  for (const auto& name : names(c)) {
    const auto want = expected_shape(c, name);
    std::vector<int64_t> got;
    if (name == "q_norm") got = {q_norm.size()};
    else if (name == "kv_norm") got = {kv_norm.size()};
    else {
      const MatrixRM& m = name == "wq" ? wq : name == "wq_a" ? wq_a : name == "wq_b" ? wq_b
                        : name == "wkv_a" ? wkv_a : name == "wkv_b" ? wkv_b : wo;
      got = {m.rows(), m.cols()};
    }
    if (got != want) {
      throw Error(fmt::format("weight '{}': expected shape [{}], have [{}]{}", name, fmt::join(want, ", "),
                              fmt::join(got, ", "), product(got) == 0 ? " (missing?)" : ""));
    }
  }
}

const char* to_string(Form f) { return f == Form::naive ? "naive" : "absorbed"; }

MlaLayer::MlaLayer(const ModelConfig& cfg, LayerWeights weights, Form form)
    : cfg_(cfg), w_(std::move(weights)), form_(form) {
  validate_config(cfg_);
  w_.validate(cfg_);
  scale_ = mla::softmax_scale(cfg_);
  inv_freq_ = rope_inv_freq(cfg_);
  const int64_t H = cfg_.n_heads;
  const int64_t a_cols = form_ == Form::naive ? H * cfg_.qk_head_dim() : cfg_.kv_lora_rank;
  const int64_t b_cols = form_ == Form::naive ? H * cfg_.v_head_dim : cfg_.qk_rope_head_dim;
  a_.assign(static_cast<std::size_t>(cfg_.max_batch_size), MatrixRM(0, a_cols));
  b_.assign(static_cast<std::size_t>(cfg_.max_batch_size), MatrixRM(0, b_cols));
}

void MlaLayer::reserve_rows(int64_t batch, int64_t rows) {
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (MatrixRM* m : {&a_[static_cast<std::size_t>(bi)], &b_[static_cast<std::size_t>(bi)]}) {
      const int64_t old = m->rows();
      if (old >= rows) continue;
      const int64_t n = std::min(std::max(rows, 2 * old), cfg_.max_seq_len);
      m->conservativeResize(n, m->cols());
      m->bottomRows(n - old).setZero();
    }
  }
}

StepResult MlaLayer::forward(std::span<const int64_t> x_shape, std::span<const double> x, int64_t start_pos,
                             bool keep_intermediates) {
  if (x_shape.size() != 3) {
    throw Error(fmt::format("layer input must be [batch, seqlen, dim], got [{}]", fmt::join(x_shape, ", ")));
  }
  const int64_t b = x_shape[0], s = x_shape[1];
  if (b < 1 || b > cfg_.max_batch_size) {
    throw Error(fmt::format("batch={} outside [1, max_batch_size={}]", b, cfg_.max_batch_size));
  }
  if (s < 1) throw Error(fmt::format("seqlen={} must be >= 1", s));
  if (x_shape[2] != cfg_.dim) throw Error(fmt::format("input dim={} but the layer has dim={}", x_shape[2], cfg_.dim));
  if (static_cast<int64_t>(x.size()) != b * s * cfg_.dim) {
    throw Error(fmt::format("input of shape [{}] given {} values", fmt::join(x_shape, ", "), x.size()));
  }
  if (start_pos < 0) throw Error(fmt::format("start_pos={} must be >= 0", start_pos));
  if (start_pos > cfg_.max_seq_len - s) {
    throw CapacityError(fmt::format("cache capacity exceeded: start_pos={} + seqlen={} > max_seq_len={}",
                                    start_pos, s, cfg_.max_seq_len));
  }
  if (s > 1 && start_pos != 0) {
    // Upstream's causal mask is seqlen×seqlen and is added to scores over end_pos positions.
    throw Error(fmt::format("a multi-token step (seqlen={}) needs start_pos=0, got start_pos={}", s, start_pos));
  }
  const int64_t end = start_pos + s;
  reserve_rows(b, end);

  StepResult res;
  res.out = Tensor({b, s, cfg_.dim});
  if (keep_intermediates) {
    const int64_t H = cfg_.n_heads;
    auto& im = res.intermediates;
    im["q_nope"] = Tensor({b, s, H, cfg_.qk_nope_head_dim});
    im["q_pe"] = Tensor({b, s, H, cfg_.qk_rope_head_dim});
    im["kv_normed"] = Tensor({b, s, cfg_.kv_lora_rank});
    im["k_pe"] = Tensor({b, s, cfg_.qk_rope_head_dim});
    im["scores"] = Tensor({b, s, H, end});
    im["probs"] = Tensor({b, s, H, end});
    if (form_ == Form::absorbed) {
      im["q_absorbed"] = Tensor({b, s, H, cfg_.kv_lora_rank});
      im["latent_out"] = Tensor({b, s, H, cfg_.kv_lora_rank});
    } else {
      im["attn_out"] = Tensor({b, s, H, cfg_.v_head_dim});
    }
  }
  for (int64_t bi = 0; bi < b; ++bi) {
    step_one(bi, x.data() + bi * s * cfg_.dim, s, start_pos, res.out.data.data() + bi * s * cfg_.dim,
             keep_intermediates ? &res : nullptr);
  }
  return res;
}

void MlaLayer::step_one(int64_t bi, const double* xp, int64_t s, int64_t start_pos, double* outp,
                        StepResult* res) {
  const int64_t H = cfg_.n_heads, nope = cfg_.qk_nope_head_dim, rope = cfg_.qk_rope_head_dim;
  const int64_t qk = nope + rope, vd = cfg_.v_head_dim, r = cfg_.kv_lora_rank, dim = cfg_.dim;
  const int64_t T = start_pos + s;
  auto* im = res ? &res->intermediates : nullptr;
  MatrixRM& A = a_[static_cast<std::size_t>(bi)];
  MatrixRM& B = b_[static_cast<std::size_t>(bi)];

  Eigen::Map<const MatrixRM> X(xp, s, dim);
  MatrixRM q;
  if (cfg_.q_lora_rank == 0) {
    q.noalias() = X * w_.wq.transpose();
  } else {
    MatrixRM qa = X * w_.wq_a.transpose();
    rms_norm_rows(qa, w_.q_norm);
    q.noalias() = qa * w_.wq_b.transpose();
  }
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t hh = 0; hh < H; ++hh) {
      apply_rope({q.data() + t * q.cols() + hh * qk + nope, static_cast<std::size_t>(rope)}, start_pos + t,
                 inv_freq_);
    }
  }
  MatrixRM kv = X * w_.wkv_a.transpose();  // [s, r + rope]
  MatrixRM c = kv.leftCols(r);
  rms_norm_rows(c, w_.kv_norm);
  MatrixRM kpe = kv.rightCols(rope);
  for (int64_t t = 0; t < s; ++t) {
    apply_rope({kpe.data() + t * rope, static_cast<std::size_t>(rope)}, start_pos + t, inv_freq_);
  }
  if (im) {
    for (int64_t hh = 0; hh < H; ++hh) {
      put_head(im->at("q_nope"), bi, hh, q.middleCols(hh * qk, nope));
      put_head(im->at("q_pe"), bi, hh, q.middleCols(hh * qk + nope, rope));
    }
    put_rows(im->at("kv_normed"), bi, c);
    put_rows(im->at("k_pe"), bi, kpe);
  }

  // Cache writes at [start_pos, T).
  if (form_ == Form::naive) {
    const MatrixRM kvb = c * w_.wkv_b.transpose();  // [s, H·(nope+v)]
    for (int64_t t = 0; t < s; ++t) {
      for (int64_t hh = 0; hh < H; ++hh) {
        A.block(start_pos + t, hh * qk, 1, nope) = kvb.block(t, hh * (nope + vd), 1, nope);
        A.block(start_pos + t, hh * qk + nope, 1, rope) = kpe.row(t);
        B.block(start_pos + t, hh * vd, 1, vd) = kvb.block(t, hh * (nope + vd) + nope, 1, vd);
      }
    }
  } else {
    A.middleRows(start_pos, s) = c;
    B.middleRows(start_pos, s) = kpe;
  }

  MatrixRM attn(s, H * vd);
  MatrixRM S(s, T);
  for (int64_t hh = 0; hh < H; ++hh) {
    if (form_ == Form::naive) {
      const StridedMap Kh(A.data() + hh * qk, T, qk, Eigen::OuterStride<>(A.cols()));
      S.noalias() = q.middleCols(hh * qk, qk) * Kh.transpose();
    } else {
      const auto W_UK = w_.wkv_b.middleRows(hh * (nope + vd), nope);  // [nope, r]
      const MatrixRM qabs = q.middleCols(hh * qk, nope) * W_UK;        // [s, r]
      if (im) put_head(im->at("q_absorbed"), bi, hh, qabs);
      S.noalias() = qabs * A.topRows(T).transpose();
      S.noalias() += q.middleCols(hh * qk + nope, rope) * B.topRows(T).transpose();
    }
    S *= scale_;
    if (s > 1) {
      // start_pos == 0 here: query i sees positions 0..i.
      for (int64_t i = 0; i < s; ++i) {
        for (int64_t t = i + 1; t < T; ++t) S(i, t) = -std::numeric_limits<double>::infinity();
      }
    }
    if (im) put_head(im->at("scores"), bi, hh, S);
    softmax_rows(S);
    if (im) put_head(im->at("probs"), bi, hh, S);
    if (form_ == Form::naive) {
      const StridedMap Vh(B.data() + hh * vd, T, vd, Eigen::OuterStride<>(B.cols()));
      attn.middleCols(hh * vd, vd).noalias() = S * Vh;
      if (im) put_head(im->at("attn_out"), bi, hh, attn.middleCols(hh * vd, vd));
    } else {
      const MatrixRM lat = S * A.topRows(T);  // [s, r]
      if (im) put_head(im->at("latent_out"), bi, hh, lat);
      const auto W_UV = w_.wkv_b.middleRows(hh * (nope + vd) + nope, vd);  // [v, r]
      attn.middleCols(hh * vd, vd).noalias() = lat * W_UV.transpose();
    }
  }
  Eigen::Map<MatrixRM>(outp, s, dim).noalias() = attn * w_.wo.transpose();
}

std::map<std::string, Tensor> MlaLayer::caches(int64_t batch, int64_t end_pos) const {
  if (batch < 1 || batch > cfg_.max_batch_size) {
    throw Error(fmt::format("caches: batch={} outside [1, max_batch_size={}]", batch, cfg_.max_batch_size));
  }
  if (end_pos < 0 || end_pos > cfg_.max_seq_len) {
    throw Error(fmt::format("caches: end_pos={} outside [0, max_seq_len={}]", end_pos, cfg_.max_seq_len));
  }
  const int64_t H = cfg_.n_heads;
  std::map<std::string, Tensor> out;
  auto copy = [&](const std::vector<MatrixRM>& src, std::vector<int64_t> shape) {
    Tensor t(std::move(shape));
    const int64_t row = t.numel() / std::max<int64_t>(batch * end_pos, 1);
    for (int64_t bi = 0; bi < batch; ++bi) {
      const MatrixRM& m = src[static_cast<std::size_t>(bi)];
      const int64_t have = std::min<int64_t>(m.rows(), end_pos);  // rows past `have` stay 0
      std::copy_n(m.data(), have * row, t.data.data() + bi * end_pos * row);
    }
    return t;
  };
  if (form_ == Form::naive) {
    out["k_cache"] = copy(a_, {batch, end_pos, H, cfg_.qk_head_dim()});
    out["v_cache"] = copy(b_, {batch, end_pos, H, cfg_.v_head_dim});
  } else {
    out["kv_cache"] = copy(a_, {batch, end_pos, cfg_.kv_lora_rank});
    out["pe_cache"] = copy(b_, {batch, end_pos, cfg_.qk_rope_head_dim});
  }
  return out;
}

}  // namespace mla::ref
