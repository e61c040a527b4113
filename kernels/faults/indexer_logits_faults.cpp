// The planted indexer logits bugs (faults.hpp lists them): a plain serial float32 kernel, right
// but for one bug each. It finds its keys on its own (not through indexer_logits_key), so that a
// scale read from the wrong place can be planted; the self-test witness is the same loop, right,
// adding the dims and the heads from the last (another order of the same sums).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/core/indexer_cache.hpp"
#include "mla/core/numeric.hpp"
#include "mla/faults/faults.hpp"

namespace mla::faults {
namespace {

constexpr int64_t kD = kIndexerHeadDim;

enum class LogitsFault { none, no_relu, scale_twice, reads_scale_after_codes, sees_later_token, masked_as_zero, bf16_accumulation };

struct LogitsSpec {
  LogitsFault fault;
  const char* name;
  const char* description;
};

const std::vector<LogitsSpec>& logits_specs() {
  static const std::vector<LogitsSpec> specs{
      {LogitsFault::no_relu, "no_relu", "sums the heads' dots without the relu"},
      {LogitsFault::scale_twice, "scale_twice", "multiplies by k_scale twice"},
      {LogitsFault::reads_scale_after_codes, "reads_scale_after_codes",
       "reads each key's scale from right after its 128 codes (a 132-byte record), not the block's scale area"},
      {LogitsFault::sees_later_token, "sees_later_token",
       "with next_n 2, lets the first query token see the second one's position"},
      {LogitsFault::masked_as_zero, "masked_as_zero", "writes 0, not -inf, outside each row's valid range"},
      {LogitsFault::bf16_accumulation, "bf16_accumulation", "accumulates each dot in bfloat16"},
  };
  return specs;
}

std::vector<float> score(const IndexerLogitsInputs& in, LogitsFault bug, bool reversed) {
  const auto& s = in.shape;
  const int64_t rows = s.rows(), cols = s.cols();
  std::vector<float> out(static_cast<std::size_t>(rows * cols),
                         bug == LogitsFault::masked_as_zero ? 0.0f : -std::numeric_limits<float>::infinity());
  const auto& value = e4m3_table();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t begin = 0, end = 0;
    if (s.layout == IndexerLogitsLayout::paged) {
      const int64_t ctx = in.context_lens[static_cast<std::size_t>(r / s.next_n)];
      // The bug: every query token of the step sees the whole context, the later tokens' too.
      end = bug == LogitsFault::sees_later_token ? ctx : std::max<int64_t>(0, ctx - s.next_n + r % s.next_n + 1);
    } else {
      begin = in.ks[static_cast<std::size_t>(r)];
      end = std::max(begin, static_cast<int64_t>(in.ke[static_cast<std::size_t>(r)]));
    }
    for (int64_t p = begin; p < end; ++p) {
      const uint8_t* k = nullptr;
      float scale = 0;
      if (s.layout == IndexerLogitsLayout::paged) {
        const int64_t block = in.block_table[static_cast<std::size_t>(r / s.next_n * s.max_blocks + p / s.block_size)];
        const int64_t slot = block * s.block_size + p % s.block_size;
        k = in.cache.data() + indexer_code_offset(s.block_size, slot);
        // The bug: the scale looked for right after the token's codes, as in a 132-byte record.
        const int64_t scale_at = bug == LogitsFault::reads_scale_after_codes ? slot * kIndexerTokenBytes + kD
                                                                              : indexer_scale_offset(s.block_size, slot);
        std::memcpy(&scale, in.cache.data() + scale_at, sizeof scale);
      } else {
        k = in.k_codes.data() + p * kD;
        scale = in.k_scales[static_cast<std::size_t>(p)];
      }
      float sum = 0;
      for (int64_t hi = 0; hi < s.heads; ++hi) {
        const int64_t h = reversed ? s.heads - 1 - hi : hi;
        float dot = 0;
        for (int64_t di = 0; di < kD; ++di) {
          const int64_t d = reversed ? kD - 1 - di : di;
          dot += static_cast<float>(value[in.q[static_cast<std::size_t>((r * s.heads + h) * kD + d)]]) *
                 static_cast<float>(value[k[d]]);
          // The bug: a bfloat16 accumulator (8 significant bits), the precision the bound must reject.
          if (bug == LogitsFault::bf16_accumulation) dot = bf16_to_float(bf16_from_float(dot));
        }
        sum += (bug == LogitsFault::no_relu ? dot : std::max(dot, 0.0f)) * in.weights[static_cast<std::size_t>(r * s.heads + h)];
      }
      out[static_cast<std::size_t>(r * cols + p)] = sum * scale * (bug == LogitsFault::scale_twice ? scale : 1.0f);
    }
  }
  return out;
}

class SerialLogits final : public IndexerLogitsImpl {
 public:
  SerialLogits(LogitsFault f, bool reversed, std::string name, std::string description) : fault_(f), reversed_(reversed) {
    info_.name = std::move(name);
    info_.backend = "cpu";
    info_.description = std::move(description);
    info_.layouts = {IndexerLogitsLayout::paged, IndexerLogitsLayout::ragged};
  }
  const IndexerLogitsKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedIndexerLogits> prepare(const IndexerLogitsInputs& in) const override {
    validate_indexer_logits_inputs(in, info_.name);
    struct Prepared final : PreparedIndexerLogits {
      LogitsFault fault;
      bool reversed;
      IndexerLogitsBuffers in;
      std::vector<float> out;
      void run() override { out = score(in.view(), fault, reversed); }
      std::vector<float> results() override { return out; }
    };
    auto p = std::make_unique<Prepared>();
    p->fault = fault_;
    p->reversed = reversed_;
    p->in = IndexerLogitsBuffers(in);
    return p;
  }

 private:
  LogitsFault fault_;
  bool reversed_;
  IndexerLogitsKernelInfo info_;
};

}  // namespace

const std::vector<std::string>& indexer_logits_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : logits_specs()) n.emplace_back(s.name);
    return n;
  }();
  return names;
}

std::unique_ptr<IndexerLogitsImpl> make_indexer_logits(const std::string& name) {
  for (const auto& s : logits_specs()) {
    if (name == s.name) {
      return std::make_unique<SerialLogits>(s.fault, false, fmt::format("cpu_indexer_logits_{}", s.name), s.description);
    }
  }
  throw Error(fmt::format("unknown indexer logits fault kernel '{}' (known: {})", name, fmt::join(indexer_logits_names(), ", ")));
}

std::unique_ptr<IndexerLogitsImpl> make_indexer_logits_reversed_witness() {
  return std::make_unique<SerialLogits>(LogitsFault::none, true, "selftest_indexer_logits_reversed",
                                        "a plain serial float32 loop adding the dims and the heads from the last");
}

}  // namespace mla::faults
