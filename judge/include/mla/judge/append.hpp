// THE judge of a cache append: the certifier (plug-in appends) and the tests of the CUDA append
// call this, with the fp64 append oracle (mla/ref/append.hpp) as the truth.
//
// Rules, for a call that must be accepted (every token within capacity):
//  * every slot no token maps to keeps its bytes exactly;
//  * bf16: every stored value within "cache.append.bf16" of the fp64 value (latent and k_pe
//    compared apart; a k_pe that matches a half-split RoPE is named as such);
//  * fp8: the dequantized latent within "cache.append.fp8.dequant", and a consistency rule that
//    the element bound alone would not pin down, decided here because re-encoding the kernel's
//    own bf16 intermediate is impossible (it is not observable). With r the fp64 value and
//    band(r) = rtol·|r| of the bf16 entry (relative only, as RMSNorm is a scaling: a zero stays
//    exactly zero):
//      scale  s of each 128-block must equal recipe(a) in float32 for the recipe the
//             implementation declares it writes (AppendProblem::fp8_recipe: DeepSeek's
//             max(a, 1e-4)/448 or FlashMLA's max(a/448, 1e-4); ue8m0: rounded up to a power of
//             two) for some amax a in [max(|r| - band), max(|r| + band)] over the block: the
//             recipe is monotone, so s must lie in [recipe(lo), recipe(hi)]. When every wrong
//             scale is the other recipe's, the reasons say the kernel writes that one;
//      codes  each e4m3 code must decode to a value in [e4m3(lo / s), e4m3(hi / s)] with lo, hi
//             the band's ends and s the token's OWN scale: the round-to-nearest-even encoding of
//             some value the kernel may legitimately have had before quantizing, nothing else.
// and for a call that must be refused (a token past capacity): the capacity status, and not one
// byte of the cache changed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mla/core/tolerance.hpp"
#include "mla/ref/append.hpp"

namespace mla {

// What the call returned.
enum class AppendStatus { ok, capacity, refused, error };

struct AppendCall {
  AppendStatus status = AppendStatus::error;
  std::string status_word;  // how the interface names that status in messages ("MLA_PLUGIN_OK")
  std::string message;      // the implementation's own text, may be empty
};

struct AppendJudgement {
  tol::Verdict verdict = tol::Verdict::error;  // pass, fail, unsupported (refused) or error
  std::vector<std::string> reasons;
  std::optional<tol::Comparison> latent, k_pe;
};

// `before` is the cache the call started from, `after` what it left ([num_blocks, page_size,
// cache_bytes_per_token]). Throws mla::Error when `p` is malformed (a caller's bug).
AppendJudgement judge_append(const ref::AppendProblem& p, std::span<const uint8_t> before,
                             std::span<const uint8_t> after, const AppendCall& call);

}  // namespace mla
