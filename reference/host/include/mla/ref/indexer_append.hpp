// The indexer append's oracle (mla/core/indexer_cache.hpp): the exact bytes the cache must hold
// after a call, computed the most literal way (amax over the bf16 values, the contract's scale,
// each code the project's e4m3 encoder applied to the float32 quotient). Every indexer append is
// judged against it (mla/judge/indexer_append.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "mla/core/indexer_cache.hpp"

namespace mla::ref {

struct IndexerKeyQuant {
  std::array<uint8_t, kIndexerHeadDim> codes{};
  float scale = 0;
};

// One key (128 bf16 values, finite): scale = indexer_key_scale(max|k|), code[d] =
// e4m3(float32(k[d] / scale)) rounded to nearest even, saturated to +-448.
IndexerKeyQuant indexer_quantize_key(std::span<const uint16_t> key, ScaleFmt fmt, IndexerScaleOp op);

// The cache after the call: `in.cache` with every token whose slot is >= 0 written at its slot
// (codes in the block's code area, scale in its scale area), nothing else changed. Validates
// first (validate_indexer_append_inputs), so a rejected call computes nothing.
std::vector<uint8_t> indexer_append_reference(const IndexerAppendInputs& in, IndexerScaleOp op);

}  // namespace mla::ref
