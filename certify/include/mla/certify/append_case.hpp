// Certifying a plug-in's append entry point (ABI 1.1): the cases, built from the family the
// catalog description certifies as appends (fixtures/catalog.json: cache_boundary, rows of
// family cache_append), and how a child's outcome becomes a verdict (judge_append,
// mla/judge/append.hpp, does the judging).
//
// Each golden case's configuration gives max_seq_len, the prefill length and the two boundary
// positions (the accepted write at max_seq_len - 1 and the refused one at max_seq_len) and its
// RoPE parameters. The ABI's widths are fixed (latent 512, rope 64) while the golden
// configuration is tiny, so the token values are drawn from the counter-based generator seeded
// by the golden's seed, and the truth is the fp64 append oracle (mla/ref/append.hpp) on exactly
// those bf16 inputs.
//
// Per claimed format (bf16; fp8 with each claimed scale format and each FP8 scale recipe the
// plug-in declares it writes, DeepSeek's when it declares none) three calls, each on a cache
// whose every byte starts as a known pattern:
//   prefill     - a prefill chunk of one sequence across a page boundary plus scattered tokens
//                 of another (first and last slot of a page, an all-zero latent, a block of
//                 1e-6-sized values that exercises the 1e-4 scale clamp), in a shuffled order;
//   last_valid  - a token at max_seq_len - 1, which must be written;
//   rejected    - valid tokens followed by one at max_seq_len: MLA_PLUGIN_CAPACITY and nothing
//                 written. The block table maps the page past capacity to a real block, so a
//                 kernel without a capacity check writes where it is seen instead of crashing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/certify/protocol.hpp"
#include "mla/core/kernel.hpp"
#include "mla/golden/golden.hpp"
#include "mla/plugin/host.hpp"
#include "mla/ref/append.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {

// One append case's outcome, as the parent read it from the shared buffers of the child's calls
// (append_arena.cpp).
struct AppendRun {
  bool ran = false;      // false: the calls could not be made or did not all return (message says why)
  std::string message;   // !ran: why; ran: the plug-in's error text
  int32_t rc = -1;
  std::vector<uint8_t> kv_cache;     // the first call's cache
  std::vector<std::string> reasons;  // the audit's findings and differences between repeated calls
  double run_seconds = 0;
  bool host_caused = false;  // the failure was the machine's (host_error.hpp)
};

struct AppendCase {
  std::string name, description;
  plugin::AppendCallInputs in;
  CacheFormat format = CacheFormat::bf16;
  ScaleFmt scale_fmt = ScaleFmt::fp32;
  Fp8Recipe fp8_recipe = Fp8Recipe::deepseek_v32;  // fp8: the recipe the plug-in declares and is judged by
  bool expect_capacity = false;  // a token past capacity: the call must be refused
  // The oracle's view of the call: the same inputs, with the format and scale to write.
  ref::AppendProblem problem() const;
  nlohmann::json shape() const;
};

// The cases of one golden case of the append family for the formats (MLA_PLUGIN_CACHE_*), FP8
// scale formats (MLA_PLUGIN_SCALE_*) and FP8 recipes (MLA_PLUGIN_RECIPE_*; 0: DeepSeek's) a
// plug-in claims; `caps` picks the page size. Throws mla::Error when the golden's boundary
// positions are not max_seq_len - 1 and max_seq_len.
std::vector<AppendCase> make_append_cases(const golden::LayerCase& g, uint32_t formats, uint32_t scale_fmts,
                                          uint32_t fp8_recipes, const Capabilities& caps);

// The fresh append cases (family `fresh`, rows of file kFreshAppendFile, names
// "append/<format>/<call>", in name order), drawn from `seed` for what a plug-in claims, as the
// catalog's are built: a claimed page size, 2-3 sequences over permuted pages, a capacity that
// is not a page multiple; per format, "scatter" (both sides of page boundaries, the last valid
// position, drawn non-contiguous positions, an all-zero latent and a block below the scale clamp,
// in a drawn order) and "rejected" (valid tokens with one at max_seq_len among them).
inline constexpr const char* kFreshAppendFile = "fresh_append";
std::vector<AppendCase> make_fresh_append_cases(uint64_t seed, uint32_t formats, uint32_t scale_fmts, uint32_t fp8_recipes,
                                                const Capabilities& caps);

// The middle part of an append case's name: "bf16", "fp8_fp32", "fp8_ue8m0" (DeepSeek's recipe,
// the names from before recipes were named), "fp8_fp32_flashmla", "fp8_ue8m0_flashmla".
std::string append_variant_name(CacheFormat format, ScaleFmt scale_fmt, Fp8Recipe recipe);

// Fills r.verdict, r.reasons, r.run_seconds and the latent (r.out) / k_pe (r.lse) comparisons
// from an append case's outcome: judge_append, plus the audit's findings for a call that was judged.
void judge_append_run(const AppendCase& c, const AppendRun& run, reports::CaseResult& r);

}  // namespace mla::certify
