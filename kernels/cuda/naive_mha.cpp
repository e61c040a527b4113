// Host side of `cuda_naive_mha_cublas`: the baseline a naive MHA implementation would run.
//
// prepare() (untimed) builds what an MHA deployment holds before a decode step: per-head K
// [h, L, 576] and V [h, L, 512] of every sequence, gathered from the paged latent cache (the
// same latent repeated per head: the attention interface carries the absorbed query, so these
// are the widths an exact MHA over it reads). run(), the timed call, is the attention alone,
// per sequence: S = Q·Kᵀ with cuBLAS (bf16 in, fp32 accumulate and out), an fp32 softmax kernel
// (causal-aware, natural-log lse) writing bf16 probabilities, O = P·V with cuBLAS (bf16 in, fp32
// accumulate, bf16 out). That is exactly the deployed-precision recipe of the goldens'
// `same_dtype` reference, so it is judged as a bf16 kernel (OutDType::bf16).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detail/cublas_api.hpp"
#include "detail/host_common.hpp"
#include "detail/naive_gemm_plan.hpp"
#include "detail/naive_mha_launch.hpp"
#include "mla/core/error.hpp"
#include "mla/cuda/attention.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/cuda/timing.hpp"

namespace mla::cuda {
namespace {

constexpr const char* kMhaName = "cuda_naive_mha_cublas";

// Device bytes prepare() keeps: per-head K and V (bf16) of every token, and S (fp32) and P
// (bf16) for the longest sequence, reused by each sequence in turn.
int64_t resident_bytes(const AttnShape& s, int64_t tokens, int64_t max_len) {
  const int64_t h = s.heads;
  return h * tokens * (576 + 512) * 2 + h * s.s_q * max_len * (4 + 2);
}

// StreamBound: run() enqueues all of its work on stream_, so benchmarks can time it with events.
class PreparedNaive final : public PreparedAttention, public StreamBound {
 public:
  explicit PreparedNaive(const AttnInputs& in) : shape_(in.shape) {
    const DeviceInfo& dev = current_device();
    MLA_CUDA_CHECK(cudaSetDevice(dev.device));
    const AttnShape& s = in.shape;
    seqlens_.assign(in.cache_seqlens.begin(), in.cache_seqlens.end());
    max_len_ = seqlens_.empty() ? 0 : *std::max_element(seqlens_.begin(), seqlens_.end());
    int64_t tokens = 0;
    for (int32_t L : seqlens_) {
      first_token_.push_back(tokens);
      tokens += L;
    }

    // The per-head copies are the point of this baseline, and also what makes it run out of
    // memory first: refuse up front, naming the size, instead of failing inside cudaMalloc.
    const int64_t resident = resident_bytes(s, tokens, max_len_);
    std::size_t free_b = 0, total_b = 0;
    MLA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const int64_t inputs = static_cast<int64_t>(in.q.size_bytes() + in.kv_cache.size_bytes());
    if (resident + inputs > static_cast<int64_t>(free_b) * 9 / 10)
      throw UnsupportedError(fmt::format(
          "{}: per-head K/V of {} tokens x {} heads and the S/P of the longest sequence ({} tokens), "
          "{:.2f} GB, plus {:.2f} GB of inputs exceed 90% of the {:.2f} GB free on the device",
          kMhaName, tokens, s.heads, max_len_, resident / 1e9, inputs / 1e9, free_b / 1e9));

    MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    q_ = DeviceBuffer(in.q.size_bytes());
    q_.upload(in.q.data(), in.q.size_bytes());
    const int64_t h = s.heads;
    k_ = DeviceBuffer(static_cast<std::size_t>(h * tokens * 576 * 2));
    v_ = DeviceBuffer(static_cast<std::size_t>(h * tokens * 512 * 2));
    gather_per_head_kv(in);
    scores_ = DeviceBuffer(static_cast<std::size_t>(h * s.s_q * max_len_ * 4));
    probs_ = DeviceBuffer(static_cast<std::size_t>(h * s.s_q * max_len_ * 2));
    n_out_ = static_cast<std::size_t>(int64_t{s.batch} * s.s_q * h * 512);
    n_lse_ = static_cast<std::size_t>(int64_t{s.batch} * h * s.s_q);
    out_ = DeviceBuffer(n_out_ * sizeof(uint16_t), /*guarded=*/true);
    out_.fill_bytes(0xFF);  // NaN until written
    lse_ = DeviceBuffer(n_lse_ * sizeof(float), /*guarded=*/true);
    lse_.fill_bytes(0xFF);
    MLA_CUBLAS_CHECK(detail::cublas().create(&handle_));
    MLA_CUBLAS_CHECK(detail::cublas().set_stream(handle_, stream_));
    // No TF32 or reduced-precision shortcuts: the inputs are bf16 and accumulation is fp32.
    MLA_CUBLAS_CHECK(detail::cublas().set_math_mode(handle_, CUBLAS_DEFAULT_MATH));
    // The copies and fills above ran on the legacy stream; finish them before run().
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    scale_ = static_cast<float>(in.softmax_scale);
  }

  ~PreparedNaive() override {
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    if (handle_ != nullptr) (void)detail::cublas().destroy(handle_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    (void)cudaGetLastError();
  }

  // Per-head K/V of every sequence, laid out sequence after sequence ([h, L_b, 576] at token
  // first_token_[b]), from a device copy of the cache that is freed before run() ever runs.
  void gather_per_head_kv(const AttnInputs& in) {
    const AttnShape& s = in.shape;
    DeviceBuffer cache(in.kv_cache.size_bytes());
    cache.upload(in.kv_cache.data(), in.kv_cache.size_bytes());
    DeviceBuffer block_table(in.block_table.size_bytes());
    block_table.upload(in.block_table.data(), in.block_table.size_bytes());
    MLA_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads ran on the legacy stream
    for (int b = 0; b < s.batch; ++b) {
      const int L = seqlens_[static_cast<std::size_t>(b)];
      const int64_t first = first_token_[static_cast<std::size_t>(b)];
      detail::naive_gather(cache.as<const uint16_t>(), block_table.as<const int32_t>() + int64_t{b} * s.max_blocks,
                           s.page_size, L, s.heads, k_.as<uint16_t>() + first * s.heads * 576,
                           v_.as<uint16_t>() + first * s.heads * 512, stream_);
    }
    MLA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // One strided-batched GEMM (bf16 inputs, fp32 accumulation) described by `g`.
  void gemm(const detail::StridedGemm& g, const void* a, cudaDataType ta, const void* b, cudaDataType tb,
            void* c, cudaDataType tc) {
    detail::strided_gemm(handle_, g, a, ta, b, tb, c, tc);
  }

  // The timed call reads q, each sequence's per-head K and V, and S and P, which pass between
  // the GEMMs and the softmax through device memory; it writes S, P, out and lse (the byte
  // model, CudaNaiveMha::cost, counts exactly these). It gathers nothing.
  void run() override {
    const AttnShape& s = shape_;
    const int h = s.heads, sq = s.s_q;
    const auto* q = q_.as<const uint16_t>();
    auto* sc = scores_.as<float>();
    auto* pr = probs_.as<uint16_t>();
    for (int b = 0; b < s.batch; ++b) {
      const int L = seqlens_[static_cast<std::size_t>(b)];
      uint16_t* out_b = out_.as<uint16_t>() + int64_t{b} * sq * h * 512;
      float* lse_b = lse_.as<float>() + int64_t{b} * h * sq;
      if (L == 0) {
        detail::naive_empty(out_b, lse_b, sq, h, stream_);
        continue;
      }
      const int64_t first = first_token_[static_cast<std::size_t>(b)];
      const uint16_t* k = k_.as<const uint16_t>() + first * h * 576;
      const uint16_t* v = v_.as<const uint16_t>() + first * h * 512;
      gemm(detail::naive_score_gemm(b, sq, h, L), k, CUDA_R_16BF, q, CUDA_R_16BF, sc, CUDA_R_32F);
      detail::naive_softmax(sc, pr, lse_b, L, sq, h, s.causal ? 1 : 0, scale_, stream_);
      gemm(detail::naive_value_gemm(b, sq, h, L), v, CUDA_R_16BF, pr, CUDA_R_16BF,
           out_.as<uint16_t>(), CUDA_R_16BF);
    }
    ran_ = true;
  }

  void synchronize() override { MLA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream() const override { return stream_; }

  AttnOutputs results() override {
    if (!ran_) throw Error(fmt::format("{}: results() before run()", kMhaName));
    synchronize();
    std::vector<uint16_t> out(n_out_);
    std::vector<float> lse(n_lse_);
    out_.download(out.data(), out.size() * sizeof(uint16_t));
    lse_.download(lse.data(), lse.size() * sizeof(float));
    if (auto d = out_.guard_damage("out")) throw Error(fmt::format("{}: out-of-bounds write: {}", kMhaName, *d));
    if (auto d = lse_.guard_damage("lse")) throw Error(fmt::format("{}: out-of-bounds write: {}", kMhaName, *d));
    AttnOutputs r;
    r.dtype = OutDType::bf16;
    r.out = detail::widen_bf16(out);
    r.lse = detail::widen_f32(lse);
    return r;
  }

 private:
  AttnShape shape_;
  std::vector<int32_t> seqlens_;
  std::vector<int64_t> first_token_;  // per sequence: its first row in k_/v_ (per head)
  int64_t max_len_ = 0;
  float scale_ = 0.f;
  std::size_t n_out_ = 0, n_lse_ = 0;
  DeviceBuffer q_, k_, v_, scores_, probs_, out_, lse_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  bool ran_ = false;
};

class CudaNaiveMha final : public AttentionImpl {
 public:
  CudaNaiveMha() {
    info_.name = kMhaName;
    info_.backend = "cuda";
    info_.description =
        "naive MHA baseline: per-head K/V materialised from the paged cache in prepare, cuBLAS bf16 "
        "GEMMs (fp32 accumulate), fp32 softmax, bf16 probabilities and output";
    info_.role = KernelRole::baseline;
    info_.out_dtype = OutDType::bf16;
    info_.compute = ComputePrecision{OutDType::bf16, OutDType::f32};  // cuBLAS bf16 GEMMs, fp32 accumulate
    info_.caps = detail::dense_bf16_caps();
  }

  const KernelInfo& info() const override { return info_; }

  std::optional<std::string> unavailable() const override { return unavailable_reason(); }

  std::optional<std::string> check(const AttnShape& shape) const override {
    return detail::check_dense_bf16_shape(info_.name, info_.caps, shape);
  }

  // What run() moves: q (bf16) of every sequence with a token (an empty one only has its out
  // and lse filled); per head and token, K (576) and V (512) in bf16, read by the two GEMMs;
  // per head, query and token, S written (fp32) by the first GEMM, P written (bf16) by the
  // softmax and read by the second GEMM (all L_b columns: the GEMMs do not skip masked ones);
  // S read by the softmax at the attended pairs only; out (bf16) and lse (fp32). The FLOPs are
  // MLA's.
  CostModel cost(const AttnInputs& in) const override {
    CostModel c = mla_cost_model(in);
    const AttnShape& s = in.shape;
    const AttnTraffic t = attention_traffic(in);
    double tokens = 0, nonempty = 0;
    for (int32_t L : in.cache_seqlens) {
      tokens += L;
      nonempty += L > 0 ? 1 : 0;
    }
    const double h = s.heads, rows = double(s.batch) * s.s_q * h;
    c.bytes = nonempty * s.s_q * h * 576 * 2 + tokens * h * (576 + 512) * 2 + tokens * h * s.s_q * (4 + 2 + 2) +
              static_cast<double>(t.pairs) * h * 4 + rows * 512 * 2 + rows * 4;
    return c;
  }

  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    if (auto why = check(in.shape)) throw UnsupportedError(*why);
    validate_attention_inputs(in, info_.name);
    if (auto why = unavailable()) throw Error(fmt::format("{}: {}", info_.name, *why));
    return std::make_unique<PreparedNaive>(in);
  }

 private:
  KernelInfo info_;
};

}  // namespace

std::unique_ptr<AttentionImpl> make_naive_mha_cublas() { return std::make_unique<CudaNaiveMha>(); }

}  // namespace mla::cuda

namespace mla::builtin {

std::unique_ptr<AttentionImpl> make_cuda_naive_mha_cublas() { return cuda::make_naive_mha_cublas(); }

}  // namespace mla::builtin
