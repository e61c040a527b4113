// Host side of `cuda_mla_decode`: validation, the split plan, device buffers, launches.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detail/host_common.hpp"
#include "detail/mla_decode_launch.hpp"
#include "mla/core/error.hpp"
#include "mla/cuda/attention.hpp"
#include "mla/cuda/check.hpp"
#include "mla/cuda/device.hpp"
#include "mla/cuda/device_buffer.hpp"
#include "mla/cuda/timing.hpp"
#include "mla/cuda/split_plan.hpp"

namespace mla::cuda {
namespace {

// The capabilities: both cache formats, dense and sparse, the CUDA suite's head and s_q ranges.
// Sparse plans one work sequence per (b, s), so s_q has no narrower limit than dense has; topk has
// none either (it is the planned sequence length, bounded only by the grid checks of the plan).
Capabilities mla_decode_caps() {
  Capabilities c = detail::dense_bf16_caps();
  c.cache_formats = {CacheFormat::bf16, CacheFormat::fp8};
  c.sparse = true;
  return c;
}

std::optional<std::string> check_mla_shape(const std::string& kernel, const Capabilities& caps,
                                           const AttnShape& s) {
  if (auto why = check_capabilities(caps, s)) return fmt::format("{}: {}", kernel, *why);
  // The dense-bf16 checks for everything but the format and topk, judged above.
  AttnShape as_dense = s;
  as_dense.cache_format = CacheFormat::bf16;
  as_dense.topk = 0;
  return detail::check_dense_bf16_shape(kernel, caps, as_dense);
}

// StreamBound: run() enqueues all of its work on stream_, so benchmarks can time it with events.
class PreparedMlaDecode final : public PreparedAttention, public StreamBound {
 public:
  PreparedMlaDecode(const AttnInputs& in, const MlaDecodeOptions& opt, std::string name)
      : name_(std::move(name)), shape_(in.shape) {
    const DeviceInfo& dev = current_device();
    MLA_CUDA_CHECK(cudaSetDevice(dev.device));
    const AttnShape& s = in.shape;
    const bool sparse = s.topk > 0;
    const int64_t rows = int64_t{s.s_q} * s.heads;
    // Sparse: one work sequence per (b, s) whose rows are the heads sharing its index list and
    // whose "length" is topk (positions in that list); dense: the caller's sequences.
    const int64_t plan_batch = sparse ? int64_t{s.batch} * s.s_q : s.batch;
    const int plan_s_q = sparse ? 1 : s.s_q;
    variant_.tile_rows = detail::decode_tile_rows(int64_t{plan_s_q} * s.heads);
    variant_.fp8 = s.cache_format == CacheFormat::fp8;
    variant_.sparse = sparse;
    const int blocks_per_sm = detail::decode_configure(variant_, dev.smem_per_block_optin);

    if (plan_batch > std::numeric_limits<int32_t>::max())
      throw UnsupportedError(fmt::format("{}: batch·s_q = {} sparse work sequences exceed 2^31", name_, plan_batch));
    SplitPlanRequest req;
    req.batch = static_cast<int>(plan_batch);
    req.s_q = plan_s_q;
    req.heads = s.heads;
    req.m_tile_rows = variant_.tile_rows;
    req.n_tile_tokens = detail::kDecodeTileTokens;
    req.num_sms = dev.sm_count;
    req.blocks_per_sm = blocks_per_sm;
    req.forced_splits = opt.forced_splits;
    plan_ = plan_decode(req, sparse ? std::vector<int32_t>(static_cast<std::size_t>(plan_batch), s.topk)
                                    : std::vector<int32_t>(in.cache_seqlens.begin(), in.cache_seqlens.end()));

    n_out_ = static_cast<std::size_t>(int64_t{s.batch} * rows * 512);
    n_lse_ = static_cast<std::size_t>(int64_t{s.batch} * rows);
    q_ = DeviceBuffer(in.q.size_bytes());
    q_.upload(in.q.data(), in.q.size_bytes());
    cache_ = DeviceBuffer(in.kv_cache.size_bytes());
    cache_.upload(in.kv_cache.data(), in.kv_cache.size_bytes());
    block_table_ = DeviceBuffer(in.block_table.size_bytes());
    block_table_.upload(in.block_table.data(), in.block_table.size_bytes());
    seqlens_ = DeviceBuffer(in.cache_seqlens.size_bytes());
    seqlens_.upload(in.cache_seqlens.data(), in.cache_seqlens.size_bytes());
    if (sparse) {
      indices_ = DeviceBuffer(in.indices.size_bytes());
      indices_.upload(in.indices.data(), in.indices.size_bytes());
    }
    work_ = DeviceBuffer(plan_.work.size() * sizeof(DecodeWork));
    work_.upload(plan_.work.data(), plan_.work.size() * sizeof(DecodeWork));
    num_splits_ = DeviceBuffer(plan_.num_splits.size() * sizeof(int32_t));
    num_splits_.upload(plan_.num_splits.data(), plan_.num_splits.size() * sizeof(int32_t));
    split_base_ = DeviceBuffer(plan_.split_base.size() * sizeof(int32_t));
    split_base_.upload(plan_.split_base.data(), plan_.split_base.size() * sizeof(int32_t));
    // Outputs start as NaN (all-ones bytes: a NaN in bf16 and fp32) inside guard bands, so an
    // element the kernels forget to write and a write past either end are both caught.
    out_ = DeviceBuffer(n_out_ * sizeof(uint16_t), /*guarded=*/true);
    out_.fill_bytes(0xFF);
    lse_ = DeviceBuffer(n_lse_ * sizeof(float), /*guarded=*/true);
    lse_.fill_bytes(0xFF);
    const std::size_t slot_rows = static_cast<std::size_t>(plan_.partial_slots) * plan_.rows;
    ws_out_ = DeviceBuffer(slot_rows * 512 * sizeof(float), /*guarded=*/true);
    ws_lse_ = DeviceBuffer(slot_rows * sizeof(float), /*guarded=*/true);
    if (slot_rows > 0) {
      ws_out_.fill_bytes(0xFF);
      ws_lse_.fill_bytes(0xFF);
    }
    MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // The copies and fills above ran on the legacy stream, with which a non-blocking stream
    // does not synchronise: finish them before the first run() can start.
    MLA_CUDA_CHECK(cudaDeviceSynchronize());

    p_.q = q_.as<const uint16_t>();
    if (variant_.fp8) {
      p_.cache8 = cache_.as<const uint8_t>();
    } else {
      p_.cache = cache_.as<const uint16_t>();
    }
    p_.block_table = block_table_.as<const int32_t>();
    p_.seqlens = seqlens_.as<const int32_t>();
    if (sparse) p_.indices = indices_.as<const int32_t>();
    p_.work = work_.as<const DecodeWork>();
    p_.num_splits = num_splits_.as<const int32_t>();
    p_.split_base = split_base_.as<const int32_t>();
    p_.num_work = static_cast<int64_t>(plan_.work.size());
    p_.batch = static_cast<int>(plan_batch);
    p_.s_q = plan_s_q;
    p_.heads = s.heads;
    p_.page_size = s.page_size;
    p_.max_blocks = s.max_blocks;
    p_.seq_q = s.s_q;
    p_.topk = s.topk;
    p_.causal = !sparse && s.causal ? 1 : 0;
    p_.scale_log2 = static_cast<float>(in.softmax_scale * std::numbers::log2e);
    p_.out = out_.as<uint16_t>();
    p_.lse = lse_.as<float>();
    p_.ws_out = ws_out_.as<float>();
    p_.ws_lse = ws_lse_.as<float>();
    p_.combine_blocks = plan_.combine_blocks;
    p_.combine_rows_per_block = plan_.combine_rows_per_block;
  }

  ~PreparedMlaDecode() override {
    if (stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);  // buffers are freed next; never under a running kernel
      (void)cudaStreamDestroy(stream_);
      (void)cudaGetLastError();
    }
  }

  void run() override {
    detail::decode_launch(p_, variant_, stream_);
    ran_ = true;
  }

  void synchronize() override { MLA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream() const override { return stream_; }

  AttnOutputs results() override {
    if (!ran_) throw Error(fmt::format("{}: results() before run()", name_));
    synchronize();
    std::vector<uint16_t> out(n_out_);
    std::vector<float> lse(n_lse_);
    out_.download(out.data(), out.size() * sizeof(uint16_t));
    lse_.download(lse.data(), lse.size() * sizeof(float));
    for (const auto* b : {&out_, &lse_, &ws_out_, &ws_lse_}) {
      const char* what = b == &out_ ? "out" : b == &lse_ ? "lse" : b == &ws_out_ ? "ws_out" : "ws_lse";
      if (auto damage = b->guard_damage(what))
        throw Error(fmt::format("{}: out-of-bounds write: {} (plan: {})", name_, *damage, plan_.describe()));
    }
    AttnOutputs r;
    r.dtype = OutDType::bf16;
    r.out = detail::widen_bf16(out);
    r.lse = detail::widen_f32(lse);
    return r;
  }

 private:
  std::string name_;
  AttnShape shape_;
  detail::DecodeVariant variant_;
  SplitPlan plan_;
  std::size_t n_out_ = 0, n_lse_ = 0;
  DeviceBuffer q_, cache_, block_table_, seqlens_, indices_, work_, num_splits_, split_base_;
  DeviceBuffer out_, lse_, ws_out_, ws_lse_;
  cudaStream_t stream_ = nullptr;
  detail::DecodeParams p_;
  bool ran_ = false;
};

class CudaMlaDecode final : public AttentionImpl {
 public:
  explicit CudaMlaDecode(MlaDecodeOptions opt) : opt_(opt) {
    if (opt.forced_splits < 0)
      throw Error(fmt::format("cuda_mla_decode: forced_splits must be >= 0, got {}", opt.forced_splits));
    info_.name = opt.forced_splits > 0 ? fmt::format("cuda_mla_decode_splits{}", opt.forced_splits)
                                       : std::string("cuda_mla_decode");
    info_.backend = "cuda";
    info_.description =
        "absorbed MLA decode: bf16 mma.sync m16n8k16 tensor cores, paged bf16 or 656-byte FP8 latent "
        "cache (FP8 dequantized to bf16 in shared memory), dense or sparse top-k, online fp32 softmax, "
        "split-KV with an lse-weighted combine";
    if (opt.forced_splits > 0) info_.description += fmt::format(" (forced {} splits)", opt.forced_splits);
    info_.role = KernelRole::optimized;
    info_.out_dtype = OutDType::bf16;
    // bf16 mma.sync operands (an FP8 cache is dequantized into bf16 tiles, P rounded to bf16),
    // fp32 softmax and accumulation.
    info_.compute = ComputePrecision{OutDType::bf16, OutDType::f32};
    info_.caps = mla_decode_caps();
  }

  const KernelInfo& info() const override { return info_; }

  std::optional<std::string> unavailable() const override {
    if (auto why = unavailable_reason()) return why;
    // The 64-row FP8 instance is the largest; a device that cannot hold it cannot run every shape.
    const std::size_t need = std::max(detail::decode_smem_bytes({64, false, false}),
                                      detail::decode_smem_bytes({64, true, false}));
    const std::size_t have = current_device().smem_per_block_optin;
    if (need > have)
      return fmt::format("{}: needs {} bytes of shared memory per block, the device allows {}",
                         info_.name, need, have);
    return std::nullopt;
  }

  std::optional<std::string> check(const AttnShape& shape) const override {
    return check_mla_shape(info_.name, info_.caps, shape);
  }

  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    if (auto why = check(in.shape)) throw UnsupportedError(*why);
    validate_attention_inputs(in, info_.name);
    if (auto why = unavailable()) throw Error(fmt::format("{}: {}", info_.name, *why));
    return std::make_unique<PreparedMlaDecode>(in, opt_, info_.name);
  }

 private:
  MlaDecodeOptions opt_;
  KernelInfo info_;
};

}  // namespace

std::unique_ptr<AttentionImpl> make_mla_decode(MlaDecodeOptions opt) {
  return std::make_unique<CudaMlaDecode>(opt);
}

}  // namespace mla::cuda

namespace mla::builtin {

std::unique_ptr<AttentionImpl> make_cuda_mla_decode() { return cuda::make_mla_decode(); }

}  // namespace mla::builtin
