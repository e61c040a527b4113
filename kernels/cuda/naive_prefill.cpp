// Host side of `cuda_naive_prefill_cublas`: MLA's prefill in the MHA form (mla/core/prefill.hpp)
// as a naive GPU implementation runs it, the baseline optimized prefill kernels (FlashAttention's
// varlen forward, FlashInfer's ragged prefill) are measured against on the same GPU.
//
// prepare() (untimed) copies q, k, v and the sequence boundaries to the device. run(), the timed
// call, goes sequence by sequence and, within a sequence, chunk by chunk of query rows sized so
// that one chunk's S and P fit a fixed 1 GiB workspace (detail/naive_prefill_plan.hpp): S = Q·Kᵀ
// with cuBLAS (bf16 in, fp32 accumulate and out, every head in one strided-batched call), an fp32
// softmax kernel with the bottom-right causal mask writing bf16 probabilities and the natural-log
// lse, then O = P·V with cuBLAS (bf16 in, fp32 accumulate, bf16 out). That is the deployed-
// precision recipe of the prefill goldens' `same_dtype` reference (mla::ref::prefill_same_dtype),
// so it is judged as a bf16 kernel with fp32 accumulation. The GEMMs compute every (query, key)
// pair, masked or not: a naive implementation does not skip the causal half, and its byte model
// says so.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detail/cublas_api.hpp"
#include "detail/host_common.hpp"
#include "detail/naive_prefill_launch.hpp"
#include "detail/naive_prefill_plan.hpp"
#include "mla/core/error.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/cuda/timing.hpp"

namespace mla::cuda {
namespace {

constexpr const char* kPrefillName = "cuda_naive_prefill_cublas";

std::vector<detail::PrefillSeq> plan_sequences(const PrefillInputs& in) {
  std::vector<detail::PrefillSeq> v;
  for (const PrefillSequence& s : prefill_sequences(in)) v.push_back({s.q_begin, s.s_q, s.k_begin, s.s_k});
  return v;
}

// StreamBound: run() enqueues all of its work on stream_, so benchmarks can time it with events.
class PreparedNaivePrefill final : public PreparedPrefill, public StreamBound {
 public:
  explicit PreparedNaivePrefill(const PrefillInputs& in) : shape_(in.shape), seqs_(plan_sequences(in)) {
    const DeviceInfo& dev = current_device();
    MLA_CUDA_CHECK(cudaSetDevice(dev.device));
    const PrefillShape& s = in.shape;
    chunks_ = detail::prefill_chunks(seqs_, s.heads);
    const int64_t pairs = detail::prefill_workspace_pairs(seqs_, chunks_);
    n_out_ = static_cast<std::size_t>(s.total_q * s.heads * detail::kPrefillDv);
    n_lse_ = static_cast<std::size_t>(s.heads * s.total_q);
    const int64_t workspace = int64_t{s.heads} * pairs * (4 + 2);
    const int64_t inputs = static_cast<int64_t>(in.q.size_bytes() + in.k.size_bytes() + in.v.size_bytes());
    const int64_t outputs = static_cast<int64_t>(n_out_ * 2 + n_lse_ * 4);
    // Refuse up front, naming the sizes, instead of failing inside cudaMalloc.
    std::size_t free_b = 0, total_b = 0;
    MLA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (workspace + inputs + outputs > static_cast<int64_t>(free_b) * 9 / 10)
      throw UnsupportedError(fmt::format("{}: q, k and v ({:.2f} GB), out and lse ({:.2f} GB) and the S/P workspace "
                                         "({:.2f} GB) exceed 90% of the {:.2f} GB free on the device",
                                         kPrefillName, inputs / 1e9, outputs / 1e9, workspace / 1e9, free_b / 1e9));
    MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const auto upload = [](DeviceBuffer& b, const void* host, std::size_t bytes) {
      b = DeviceBuffer(bytes);
      if (bytes > 0) b.upload(host, bytes);
    };
    upload(q_, in.q.data(), in.q.size_bytes());
    upload(k_, in.k.data(), in.k.size_bytes());
    upload(v_, in.v.data(), in.v.size_bytes());
    scores_ = DeviceBuffer(static_cast<std::size_t>(int64_t{s.heads} * pairs * 4));
    probs_ = DeviceBuffer(static_cast<std::size_t>(int64_t{s.heads} * pairs * 2));
    out_ = DeviceBuffer(n_out_ * sizeof(uint16_t), /*guarded=*/true);
    out_.fill_bytes(0xFF);  // NaN until written: a row the kernel forgets fails the judge
    lse_ = DeviceBuffer(n_lse_ * sizeof(float), /*guarded=*/true);
    lse_.fill_bytes(0xFF);
    MLA_CUBLAS_CHECK(detail::cublas().create(&handle_));
    MLA_CUBLAS_CHECK(detail::cublas().set_stream(handle_, stream_));
    // No TF32 or reduced-precision shortcuts: the inputs are bf16 and accumulation is fp32.
    MLA_CUBLAS_CHECK(detail::cublas().set_math_mode(handle_, CUBLAS_DEFAULT_MATH));
    // The copies and fills above ran on the legacy stream, with which a non-blocking stream does
    // not synchronise: finish them before the first run() can start.
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    scale_ = static_cast<float>(in.softmax_scale);
  }

  ~PreparedNaivePrefill() override {
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);  // never free under a running kernel
    if (handle_ != nullptr) (void)detail::cublas().destroy(handle_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    (void)cudaGetLastError();
  }

  void gemm(const detail::StridedGemm& g, const void* a, const void* b, void* c, cudaDataType tc) {
    detail::strided_gemm(handle_, g, a, CUDA_R_16BF, b, CUDA_R_16BF, c, tc);
  }

  void run() override {
    const PrefillShape& s = shape_;
    const int h = s.heads;
    for (const detail::PrefillSeq& q : seqs_)
      if (q.s_k == 0) detail::prefill_empty(out_.as<uint16_t>() + q.q_begin * h * detail::kPrefillDv, lse_.as<float>(),
                                            h, q.s_q, s.total_q, q.q_begin, stream_);
    for (const detail::PrefillChunk& c : chunks_) {
      const detail::PrefillSeq& q = seqs_[static_cast<std::size_t>(c.seq)];
      gemm(detail::prefill_score_gemm(q, c, h), k_.data(), q_.data(), scores_.data(), CUDA_R_32F);
      detail::prefill_softmax(scores_.as<const float>(), probs_.as<uint16_t>(), lse_.as<float>(), h, c.rows, q.s_k,
                              q.s_q, c.row0, s.causal ? 1 : 0, scale_, s.total_q, q.q_begin + c.row0, stream_);
      gemm(detail::prefill_value_gemm(q, c, h), v_.data(), probs_.data(), out_.data(), CUDA_R_16BF);
    }
    ran_ = true;
  }

  void synchronize() override { MLA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream() const override { return stream_; }

  PrefillOutputs results() override {
    if (!ran_) throw Error(fmt::format("{}: results() before run()", kPrefillName));
    synchronize();
    std::vector<uint16_t> out(n_out_);
    std::vector<float> lse(n_lse_);
    if (!out.empty()) out_.download(out.data(), out.size() * sizeof(uint16_t));
    if (!lse.empty()) lse_.download(lse.data(), lse.size() * sizeof(float));
    if (auto d = out_.guard_damage("out")) throw Error(fmt::format("{}: out-of-bounds write: {}", kPrefillName, *d));
    if (auto d = lse_.guard_damage("lse")) throw Error(fmt::format("{}: out-of-bounds write: {}", kPrefillName, *d));
    PrefillOutputs r;
    r.dtype = OutDType::bf16;
    r.out = detail::widen_bf16(out);
    r.lse = detail::widen_f32(lse);
    return r;
  }

 private:
  PrefillShape shape_;
  std::vector<detail::PrefillSeq> seqs_;
  std::vector<detail::PrefillChunk> chunks_;
  float scale_ = 0.f;
  std::size_t n_out_ = 0, n_lse_ = 0;
  DeviceBuffer q_, k_, v_, scores_, probs_, out_, lse_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  bool ran_ = false;
};

class CudaNaivePrefill final : public PrefillImpl {
 public:
  CudaNaivePrefill() {
    info_.name = kPrefillName;
    info_.backend = "cuda";
    info_.description =
        "naive MHA-form prefill: per sequence and chunk of query rows, cuBLAS bf16 Q·Kᵀ (fp32 accumulate), "
        "an fp32 softmax kernel with the bottom-right causal mask, bf16 probabilities, cuBLAS P·V, bf16 output";
    info_.role = KernelRole::baseline;
    info_.out_dtype = OutDType::bf16;
    info_.compute = ComputePrecision{OutDType::bf16, OutDType::f32};  // cuBLAS bf16 GEMMs, fp32 accumulate
  }

  const PrefillKernelInfo& info() const override { return info_; }

  std::optional<std::string> unavailable() const override { return unavailable_reason(); }

  // The prefill FLOP model (causal pairs only, as the peers count them) and what this
  // implementation's timed call actually moves (the plan's bytes: whole S and P rectangles).
  CostModel cost(const PrefillInputs& in) const override {
    CostModel c = prefill_cost_model(in, info_.out_dtype);
    c.bytes = detail::prefill_naive_bytes(plan_sequences(in), in.shape.heads, in.shape.causal);
    return c;
  }

  std::unique_ptr<PreparedPrefill> prepare(const PrefillInputs& in) const override {
    validate_prefill_inputs(in, info_.name);
    if (auto why = check(in)) throw UnsupportedError(info_.name + ": " + *why);
    if (auto why = unavailable()) throw Error(fmt::format("{}: {}", info_.name, *why));
    return std::make_unique<PreparedNaivePrefill>(in);
  }

 private:
  PrefillKernelInfo info_;
};

}  // namespace
}  // namespace mla::cuda

namespace mla::builtin {
std::unique_ptr<PrefillImpl> make_cuda_naive_prefill_cublas() { return std::make_unique<cuda::CudaNaivePrefill>(); }
}  // namespace mla::builtin
