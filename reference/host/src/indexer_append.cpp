#include "mla/ref/indexer_append.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mla/core/numeric.hpp"

namespace mla::ref {

IndexerKeyQuant indexer_quantize_key(std::span<const uint16_t> key, ScaleFmt fmt, IndexerScaleOp op) {
  IndexerKeyQuant q;
  double amax = 0;
  for (const uint16_t b : key) amax = std::max(amax, std::fabs(static_cast<double>(bf16_to_float(b))));
  q.scale = indexer_key_scale(amax, fmt, op);
  for (std::size_t d = 0; d < key.size(); ++d) {
    // The quotient in float32, correctly rounded, as every writer divides; then one RNE rounding
    // to e4m3, saturating: the quotient of the largest value passes 448 when the float32 scale
    // rounded below amax / 448.
    const float x = bf16_to_float(key[d]) / q.scale;
    q.codes[d] = e4m3_from_double(x);
  }
  return q;
}

std::vector<uint8_t> indexer_append_reference(const IndexerAppendInputs& in, IndexerScaleOp op) {
  validate_indexer_append_inputs(in, "indexer_append_reference");
  std::vector<uint8_t> cache(in.cache.begin(), in.cache.end());
  const int64_t bs = in.shape.block_size;
  for (int64_t t = 0; t < in.shape.num_tokens; ++t) {
    const int64_t slot = in.slot_mapping[static_cast<std::size_t>(t)];
    if (slot < 0) continue;
    const auto q = indexer_quantize_key(in.keys.subspan(static_cast<std::size_t>(t * kIndexerHeadDim), kIndexerHeadDim),
                                        in.shape.scale_fmt, op);
    std::memcpy(cache.data() + indexer_code_offset(bs, slot), q.codes.data(), q.codes.size());
    std::memcpy(cache.data() + indexer_scale_offset(bs, slot), &q.scale, sizeof(float));
  }
  return cache;
}

}  // namespace mla::ref
