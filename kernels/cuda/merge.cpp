// Host side of `cuda_merge`: the merge of two partial attention states on the GPU
// (detail/merge_kernels.cuh), bf16 and float32 states, canonical conventions. Validation and
// claims first, then device copies of the inputs, outputs prefilled with NaN inside guard bands
// (an element the kernel forgets to write and a write past either end are both caught), and one
// launch per run() on the prepared call's own stream.
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detail/merge_launch.hpp"
#include "mla/core/error.hpp"
#include "mla/core/merge.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/cuda/timing.hpp"

namespace mla::cuda {
namespace {

// StreamBound: run() enqueues its one launch on stream_, so benchmarks can time it with events.
class PreparedCudaMerge final : public PreparedMerge, public StreamBound {
 public:
  PreparedCudaMerge(const MergeInputs& in, std::string name) : name_(std::move(name)), shape_(in.shape) {
    MLA_CUDA_CHECK(cudaSetDevice(current_device().device));
    const std::size_t values = static_cast<std::size_t>(in.shape.tokens * in.shape.heads * in.shape.head_dim);
    const std::size_t rows = static_cast<std::size_t>(in.shape.tokens * in.shape.heads);
    const std::size_t vb = bytes_per_value(in.shape.dtype);
    const auto upload = [](DeviceBuffer& b, const void* host, std::size_t bytes) {
      b = DeviceBuffer(bytes);
      if (bytes > 0) b.upload(host, bytes);
    };
    upload(out_a_, in.out_a.data(), values * vb);
    upload(out_b_, in.out_b.data(), values * vb);
    upload(lse_a_, in.lse_a.data(), rows * sizeof(float));
    upload(lse_b_, in.lse_b.data(), rows * sizeof(float));
    out_ = DeviceBuffer(values * vb, /*guarded=*/true);
    out_.fill_bytes(0xFF);  // NaN in bf16 and in float32
    lse_ = DeviceBuffer(rows * sizeof(float), /*guarded=*/true);
    lse_.fill_bytes(0xFF);
    MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // The copies and fills above ran on the legacy stream, with which a non-blocking stream does
    // not synchronise: finish them before the first run() can start.
    MLA_CUDA_CHECK(cudaDeviceSynchronize());
    a_.tokens = in.shape.tokens;
    a_.heads = in.shape.heads;
    a_.head_dim = in.shape.head_dim;
    a_.dtype = in.shape.dtype == StateDType::f32 ? detail::MergeDType::f32 : detail::MergeDType::bf16;
    a_.out_a = out_a_.data();
    a_.out_b = out_b_.data();
    a_.lse_a = lse_a_.as<const float>();
    a_.lse_b = lse_b_.as<const float>();
    a_.out = out_.data();
    a_.lse = lse_.as<float>();
  }

  ~PreparedCudaMerge() override {
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);  // buffers are freed next; never under a running kernel
      (void)cudaStreamDestroy(stream_);
      (void)cudaGetLastError();
    }
  }

  void run() override {
    detail::merge_launch(a_, stream_);
    ran_ = true;
  }

  void synchronize() override { MLA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream() const override { return stream_; }

  MergeOutputs results() override {
    if (!ran_) throw Error(fmt::format("{}: results() before run()", name_));
    synchronize();
    std::vector<uint8_t> out(out_.size());
    std::vector<float> lse(lse_.size() / sizeof(float));
    if (!out.empty()) out_.download(out.data(), out.size());
    if (!lse.empty()) lse_.download(lse.data(), lse.size() * sizeof(float));
    for (const auto* b : {&out_, &lse_}) {
      if (auto damage = b->guard_damage(b == &out_ ? "out" : "lse"))
        throw Error(fmt::format("{}: out-of-bounds write: {}", name_, *damage));
    }
    MergeOutputs r;
    r.dtype = shape_.dtype;
    r.out.resize(out.size() / bytes_per_value(shape_.dtype));
    for (std::size_t i = 0; i < r.out.size(); ++i) r.out[i] = state_value(shape_.dtype, out, i);
    r.lse.assign(lse.begin(), lse.end());
    return r;
  }

 private:
  std::string name_;
  MergeShape shape_;
  DeviceBuffer out_a_, out_b_, lse_a_, lse_b_, out_, lse_;
  cudaStream_t stream_ = nullptr;
  detail::MergeArgs a_;
  bool ran_ = false;
};

class CudaMerge final : public MergeImpl {
 public:
  CudaMerge() {
    info_.name = "cuda_merge";
    info_.backend = "cuda";
    info_.description =
        "merge of two attention states on the GPU: one block per (token, head) row, float32 weights "
        "relative to the larger lse, out rounded once to the state dtype (bf16 or float32 states)";
    info_.role = KernelRole::optimized;
    info_.dtypes = {StateDType::bf16, StateDType::f32};
  }

  const MergeKernelInfo& info() const override { return info_; }

  std::optional<std::string> unavailable() const override { return unavailable_reason(); }

  std::optional<std::string> check(const MergeShape& s) const override {
    if (auto why = MergeImpl::check(s)) return why;
    // One block per row: the grid's x dimension bounds the rows of one launch.
    if (s.tokens * s.heads > INT_MAX)
      return fmt::format("{} rows (tokens x heads) exceed one launch's {} blocks", s.tokens * s.heads, INT_MAX);
    return std::nullopt;
  }

  std::unique_ptr<PreparedMerge> prepare(const MergeInputs& in) const override {
    validate_merge_inputs(in, info_.name);
    if (auto why = check(in.shape)) throw UnsupportedError(info_.name + ": " + *why);
    if (auto why = unavailable()) throw Error(fmt::format("{}: {}", info_.name, *why));
    return std::make_unique<PreparedCudaMerge>(in, info_.name);
  }

 private:
  MergeKernelInfo info_;
};

}  // namespace
}  // namespace mla::cuda

namespace mla::builtin {
std::unique_ptr<MergeImpl> make_cuda_merge() { return std::make_unique<cuda::CudaMerge>(); }
}  // namespace mla::builtin
