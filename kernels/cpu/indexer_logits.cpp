// cpu_indexer_logits: V3.2's lightning-indexer scores (mla/core/indexer_logits.hpp), paged and
// ragged, in float32 as DeepGEMM's fp8_paged_mqa_logits / fp8_mqa_logits compute them: each
// head's 128-term dot of the e4m3 values in float32, relu, times the head weight (the q scale
// already folded in), summed over heads, times the key's float32 scale; -inf outside each row's
// valid range (clean_logits). The baseline indexer logits kernels are measured against.
#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/indexer_logits.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"

namespace mla::cpu {
namespace {


class IndexerLogitsPrepared final : public PreparedIndexerLogits {
 public:
  explicit IndexerLogitsPrepared(const IndexerLogitsInputs& in)
      : in_(in), out_(static_cast<std::size_t>(in.shape.rows() * in.shape.cols())) {
    for (int c = 0; c < 256; ++c) value_[static_cast<std::size_t>(c)] = static_cast<float>(e4m3_table()[static_cast<std::size_t>(c)]);
  }
  void run() override {
    const auto in = in_.view();
    const int64_t cols = in.shape.cols(), heads = in.shape.heads;
    parallel_for(static_cast<std::size_t>(in.shape.rows()), 1, [&](std::size_t r0, std::size_t r1) {
      std::vector<float> q(static_cast<std::size_t>(heads * kIndexerHeadDim));
      for (std::size_t r = r0; r < r1; ++r) {
        for (std::size_t i = 0; i < q.size(); ++i) q[i] = value_[in.q[r * q.size() + i]];
        const float* w = in.weights.data() + r * static_cast<std::size_t>(heads);
        float* row = out_.data() + r * static_cast<std::size_t>(cols);
        const auto range = indexer_logits_range(in, static_cast<int64_t>(r));
        std::fill(row, row + cols, -std::numeric_limits<float>::infinity());
        for (int64_t p = range.begin; p < range.end; ++p) {
          const auto key = indexer_logits_key(in, static_cast<int64_t>(r), p);
          float k[kIndexerHeadDim];
          for (int64_t d = 0; d < kIndexerHeadDim; ++d) k[d] = value_[key.codes[d]];
          float sum = 0.0f;
          for (int64_t h = 0; h < heads; ++h) {
            const float* qh = q.data() + h * kIndexerHeadDim;
            float dot = 0.0f;
            for (int64_t d = 0; d < kIndexerHeadDim; ++d) dot += qh[d] * k[d];
            sum += std::max(dot, 0.0f) * w[h];
          }
          row[p] = sum * key.scale;
        }
      }
    });
  }
  std::vector<float> results() override { return out_; }

 private:
  IndexerLogitsBuffers in_;
  std::vector<float> out_;
  std::array<float, 256> value_{};
};

class IndexerLogits final : public IndexerLogitsImpl {
 public:
  IndexerLogits() {
    info_.name = "cpu_indexer_logits";
    info_.backend = "cpu";
    info_.description = "V3.2 indexer scores in float32 (DeepGEMM's fp8_paged_mqa_logits and fp8_mqa_logits): "
                        "k_scale * sum_h w_h * relu(q8_h . k8), paged 132-byte cache or ragged keys, -inf outside";
    info_.role = KernelRole::baseline;
    info_.layouts = {IndexerLogitsLayout::paged, IndexerLogitsLayout::ragged};
    info_.next_ns = {1, 2};
  }
  const IndexerLogitsKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedIndexerLogits> prepare(const IndexerLogitsInputs& in) const override {
    validate_indexer_logits_inputs(in, info_.name);
    if (auto why = check(in.shape)) throw UnsupportedError(info_.name + ": " + *why);
    return std::make_unique<IndexerLogitsPrepared>(in);
  }

 private:
  IndexerLogitsKernelInfo info_;
};

}  // namespace
}  // namespace mla::cpu

namespace mla::builtin {
std::unique_ptr<IndexerLogitsImpl> make_cpu_indexer_logits() { return std::make_unique<cpu::IndexerLogits>(); }
}  // namespace mla::builtin
