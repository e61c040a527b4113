// THE judge of an indexer key cache append (mla/core/indexer_cache.hpp), with the exact oracle
// (mla/ref/indexer_append.hpp) as the truth. Every byte of the cache is decided:
//  * a written token's 128 codes and its float32 scale must equal the oracle's bitwise, for the
//    call's scale_fmt and the float32 operation the implementation declares (tolerance entries
//    indexer.append.codes and indexer.append.scales, both exact);
//  * every other byte (slots no token maps to, skipped tokens' slots, padding of a partial last
//    block) must keep its prior value: the cache starts from the caller's pattern.
// Each reason names the token, its slot, the byte offset, expected and got; when the wrong bytes
// all fit one known bug the reasons say which: the scale stored after each token's codes
// (interleaved layout), another recipe's scales, codes that are the other e4m3 neighbour of the
// quotient (not rounded to nearest even), a skipped token written anyway.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mla/core/indexer_cache.hpp"
#include "mla/core/tolerance.hpp"

namespace mla {

struct IndexerAppendJudgement {
  tol::Verdict verdict = tol::Verdict::error;  // pass or fail
  std::vector<std::string> reasons;
  // The written slots' dequantized codes [tokens written, 128] and scales [tokens written] vs
  // the oracle's; absent when the cache came back with the wrong size.
  std::optional<tol::Comparison> codes, scales;
  int64_t wrong_code_bytes = 0, wrong_scales = 0, changed_untouched_bytes = 0;
};

// `in.cache` is the cache before the call, `after` what the call left; `op` the float32 scale
// operation the implementation declares. Throws mla::Error when `in` is malformed (the caller's
// bug: validate_indexer_append_inputs's reasons).
IndexerAppendJudgement judge_indexer_append(const IndexerAppendInputs& in, IndexerScaleOp op,
                                            std::span<const uint8_t> after);

}  // namespace mla
