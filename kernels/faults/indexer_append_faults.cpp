// The planted indexer-cache append bugs (faults.hpp lists them): a plain serial writer of the
// 132-byte cache, right but for one bug each.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/faults/faults.hpp"

namespace mla::faults {
namespace {

constexpr int64_t kD = kIndexerHeadDim;

enum class AppendFault { scale_after_each_token, truncating_codes, fp32_scale_for_ue8m0, writes_skipped_token, writes_past_codes };

struct AppendSpec {
  AppendFault fault;
  const char* name;
  const char* description;
};

const std::vector<AppendSpec>& append_specs() {
  static const std::vector<AppendSpec> specs{
      {AppendFault::scale_after_each_token, "scale_after_each_token",
       "stores each token's scale right after its 128 codes (the MLA FP8 token's layout), not in the block's scale area"},
      {AppendFault::truncating_codes, "truncating_codes", "rounds each code toward zero, not to nearest even"},
      {AppendFault::fp32_scale_for_ue8m0, "fp32_scale_for_ue8m0", "writes float32 scales when ue8m0 ones are asked for"},
      {AppendFault::writes_skipped_token, "writes_skipped_token",
       "writes a token whose slot is negative, Python-style, into the slot counted from the end"},
      {AppendFault::writes_past_codes, "writes_past_codes",
       "copies the token's scale after its codes as well: 4 bytes into the next slot's codes"},
  };
  return specs;
}

void write_cache(AppendFault f, const IndexerAppendInputs& in, std::vector<uint8_t>& cache) {
  const int64_t bs = in.shape.block_size, n_slots = in.shape.num_blocks * bs;
  for (int64_t t = 0; t < in.shape.num_tokens; ++t) {
    int64_t slot = in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot < 0) {
      if (f != AppendFault::writes_skipped_token || slot + n_slots < 0) continue;
      slot += n_slots;
    }
    float k[kD], amax = 0;
    for (int64_t d = 0; d < kD; ++d) amax = std::max(amax, std::fabs(k[d] = bf16_to_float(in.keys[static_cast<std::size_t>(t * kD + d)])));
    const ScaleFmt fmt = f == AppendFault::fp32_scale_for_ue8m0 ? ScaleFmt::fp32 : in.shape.scale_fmt;
    const float scale = indexer_key_scale(amax, fmt, IndexerScaleOp::divide);
    uint8_t codes[kD];
    for (int64_t d = 0; d < kD; ++d) {
      const float q = k[d] / scale;
      codes[d] = e4m3_from_double(q);
      // Toward zero: the lower-magnitude neighbour whenever the nearest one is above.
      if (f == AppendFault::truncating_codes && std::fabs(e4m3_to_double(codes[d])) > std::fabs(q) && (codes[d] & 0x7F) > 0) {
        --codes[d];
      }
    }
    if (f == AppendFault::scale_after_each_token) {
      std::memcpy(cache.data() + slot * kIndexerTokenBytes, codes, kD);
      std::memcpy(cache.data() + slot * kIndexerTokenBytes + kD, &scale, sizeof scale);
      continue;
    }
    std::memcpy(cache.data() + indexer_code_offset(bs, slot), codes, kD);
    std::memcpy(cache.data() + indexer_scale_offset(bs, slot), &scale, sizeof scale);
    if (f == AppendFault::writes_past_codes) std::memcpy(cache.data() + indexer_code_offset(bs, slot) + kD, &scale, sizeof scale);
  }
}

class FaultyAppend final : public IndexerAppendImpl {
 public:
  FaultyAppend(AppendFault f, std::string name, std::string description) : fault_(f) {
    info_.name = std::move(name);
    info_.backend = "cpu";
    info_.description = std::move(description);
    info_.scale_fmts = {ScaleFmt::ue8m0, ScaleFmt::fp32};
    info_.conventions.fp32_scale_op = IndexerScaleOp::divide;
  }
  const IndexerAppendKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedIndexerAppend> prepare(const IndexerAppendInputs& in) const override {
    validate_indexer_append_inputs(in, info_.name);
    struct Prepared final : PreparedIndexerAppend {
      AppendFault fault;
      IndexerAppendBuffers in;
      std::vector<uint8_t> cache;
      void run() override { write_cache(fault, in.view(), cache); }
      std::vector<uint8_t> results() override { return cache; }
    };
    auto p = std::make_unique<Prepared>();
    p->fault = fault_;
    p->in = IndexerAppendBuffers(in);
    p->cache = p->in.cache;
    return p;
  }

 private:
  AppendFault fault_;
  IndexerAppendKernelInfo info_;
};

}  // namespace

const std::vector<std::string>& indexer_append_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : append_specs()) n.emplace_back(s.name);
    return n;
  }();
  return names;
}

std::unique_ptr<IndexerAppendImpl> make_indexer_append(const std::string& name) {
  for (const auto& s : append_specs()) {
    if (name == s.name) return std::make_unique<FaultyAppend>(s.fault, fmt::format("cpu_indexer_append_{}", s.name), s.description);
  }
  throw Error(fmt::format("unknown indexer append fault kernel '{}' (known: {})", name, fmt::join(indexer_append_names(), ", ")));
}

}  // namespace mla::faults
