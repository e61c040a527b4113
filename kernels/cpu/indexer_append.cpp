// cpu_indexer_append: V3.2's indexer keys into their paged 132-byte FP8 cache
// (mla/core/indexer_cache.hpp) as vLLM's indexer_k_quant_and_cache computes them: float32
// throughout, amax over the token's 128 values, scale = max(amax, 1e-4) / 448 (ue8m0: rounded up
// to a power of two), codes e4m3(k / scale) to nearest even, saturating; within each block the
// codes of all its tokens first, then their scales; a slot < 0 writes nothing. The baseline
// indexer appends are measured against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/threads.hpp"

namespace mla::cpu {
namespace {


class IndexerAppendPrepared final : public PreparedIndexerAppend {
 public:
  // The cache is moved out of the copied inputs, not copied again: run() writes only cache_,
  // and a second copy of the whole cache would double the bytes per slot the kernel holds
  // (`mla memory --check` measures them against the byte model's 132).
  IndexerAppendPrepared(const IndexerAppendInputs& in, IndexerScaleOp op)
      : in_(in), op_(op), cache_(std::move(in_.cache)) {}
  void run() override {
    const auto& s = in_.shape;
    const int64_t block_bytes = s.block_size * kIndexerTokenBytes;
    // Tokens own distinct slots (validated), so threads never write the same bytes.
    parallel_for(static_cast<std::size_t>(s.num_tokens), 64, [&](std::size_t t0, std::size_t t1) {
      float k[kIndexerHeadDim];
      for (std::size_t t = t0; t < t1; ++t) {
        const int64_t slot = in_.slot_mapping[t];
        if (slot < 0) continue;
        float amax = 0.0f;
        for (int64_t d = 0; d < kIndexerHeadDim; ++d) {
          k[d] = bf16_to_float(in_.keys[t * kIndexerHeadDim + static_cast<std::size_t>(d)]);
          amax = std::max(amax, std::fabs(k[d]));
        }
        const float scale = indexer_key_scale(amax, s.scale_fmt, op_);
        uint8_t* block = cache_.data() + (slot / s.block_size) * block_bytes;
        const int64_t offset = slot % s.block_size;
        uint8_t* codes = block + offset * kIndexerHeadDim;
        for (int64_t d = 0; d < kIndexerHeadDim; ++d) codes[d] = e4m3_from_double(k[d] / scale);
        std::memcpy(block + s.block_size * kIndexerHeadDim + offset * kIndexerScaleBytes, &scale, sizeof(float));
      }
    });
  }
  std::vector<uint8_t> results() override { return cache_; }

 private:
  IndexerAppendBuffers in_;
  IndexerScaleOp op_;
  std::vector<uint8_t> cache_;
};

class IndexerAppend final : public IndexerAppendImpl {
 public:
  IndexerAppend() {
    info_.name = "cpu_indexer_append";
    info_.backend = "cpu";
    info_.description = "V3.2 indexer keys into the paged 132-byte FP8 cache in float32 (vLLM's recipe: "
                        "max(amax, 1e-4) / 448, ue8m0 or fp32), codes then scales within each block";
    info_.role = KernelRole::baseline;
    info_.scale_fmts = {ScaleFmt::ue8m0, ScaleFmt::fp32};
    info_.conventions.fp32_scale_op = IndexerScaleOp::divide;
  }
  const IndexerAppendKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedIndexerAppend> prepare(const IndexerAppendInputs& in) const override {
    validate_indexer_append_inputs(in, info_.name);
    if (auto why = check(in.shape)) throw UnsupportedError(info_.name + ": " + *why);
    return std::make_unique<IndexerAppendPrepared>(in, info_.conventions.fp32_scale_op);
  }

 private:
  IndexerAppendKernelInfo info_;
};

}  // namespace
}  // namespace mla::cpu

namespace mla::builtin {
std::unique_ptr<IndexerAppendImpl> make_cpu_indexer_append() { return std::make_unique<cpu::IndexerAppend>(); }
}  // namespace mla::builtin
