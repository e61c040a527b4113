// Certifying a plug-in's append entry point (ABI 1.1): the cases, the child side of a call, and
// the judgement.
//
// Cases come from the cache_boundary goldens: each case's configuration gives max_seq_len, the
// prefill length and the two boundary positions (the accepted write at max_seq_len - 1 and the
// refused one at max_seq_len) and its RoPE parameters. The ABI's widths are fixed (latent 512,
// rope 64) while the golden configuration is tiny, so the token values are drawn from the
// counter-based generator seeded by the golden's seed, and the truth is the fp64 append
// reference (mla/kernels/append.hpp) on exactly those bf16 inputs.
//
// Per claimed format (bf16; fp8 with each claimed scale format) three calls, each on a cache
// whose every byte starts as a known pattern:
//   prefill     - a prefill chunk of one sequence across a page boundary plus scattered tokens
//                 of another (first and last slot of a page, an all-zero latent, a block of
//                 1e-6-sized values that exercises the 1e-4 scale clamp), in a shuffled order;
//   last_valid  - a token at max_seq_len - 1, which must be written;
//   rejected    - valid tokens followed by one at max_seq_len: MLA_PLUGIN_CAPACITY and nothing
//                 written. The block table maps the page past capacity to a real block, so a
//                 kernel without a capacity check writes where it is seen instead of crashing.
// Every slot no token maps to must keep its bytes exactly.
//
// FP8 rule (decided here, because re-encoding the kernel's own bf16 intermediate is impossible:
// it is not observable). With r the fp64 value and band(r) = rtol·|r| of the bf16 entry
// ("cache.append.bf16"; relative only, as RMSNorm is a scaling: a zero stays exactly zero):
//   scale  s of each 128-block must equal recipe(a) = max(a, 1e-4)/448 in float32 (ue8m0: rounded
//          up to a power of two) for some amax a in [max(|r| - band), max(|r| + band)] over the
//          block: recipe is monotone, so s must lie in [recipe(amax_lo), recipe(amax_hi)];
//   codes  each e4m3 code must decode to a value in [e4m3(lo / s), e4m3(hi / s)] with lo, hi the
//          band's ends and s the token's OWN scale: the round-to-nearest-even encoding of some
//          value the kernel may legitimately have had before quantizing, and nothing else.
// Plus the dequantized values against r with "cache.append.fp8.dequant" for the error metrics.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/fixtures/golden.hpp"
#include "mla/kernels/append.hpp"
#include "mla/kernels/attention.hpp"
#include "mla/plugin/host.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {

inline constexpr const char* kAppendFamily = "cache_append";
inline constexpr const char* kAppendGoldenFile = "cache_boundary.h5";

struct AppendCase {
  std::string name, description;
  plugin::AppendCallInputs in;
  CacheFormat format = CacheFormat::bf16;
  ScaleFmt scale_fmt = ScaleFmt::fp32;
  bool expect_capacity = false;
  int32_t rejected_token = -1;  // expect_capacity: the token past capacity
  std::vector<int64_t> slots;   // !expect_capacity: the slot of each token
  std::vector<double> values;   // !expect_capacity: [n, 576] fp64 truth
  nlohmann::json shape() const;
};

// The cases of one cache_boundary golden case for the formats (MLA_PLUGIN_CACHE_*) and FP8 scale
// formats (MLA_PLUGIN_SCALE_*) a plug-in claims; `caps` picks the page size. Throws mla::Error
// when the golden's boundary positions are not max_seq_len - 1 and max_seq_len.
std::vector<AppendCase> make_append_cases(const fixtures::LayerCase& golden, uint32_t formats, uint32_t scale_fmts,
                                          const Capabilities& caps);

// The reference's view of one call: the same inputs, with the format and scale to write.
AppendProblem problem_of(const plugin::AppendCallInputs& in, CacheFormat format, ScaleFmt scale);
AppendProblem problem_of(const AppendCase& c);

struct AppendRun {
  bool ran = false;      // false: the child could not call the plug-in (message says why)
  std::string message;   // !ran: why; ran: the plug-in's error text
  int32_t rc = -1;
  std::vector<uint8_t> kv_cache;
  std::vector<std::string> reasons;  // audit violations and differences between repeated calls
  double run_seconds = 0;
};

void write_append_inputs(const std::filesystem::path& file, const plugin::AppendCallInputs& in);
plugin::AppendCallInputs read_append_inputs(const std::filesystem::path& file);
void write_append_result(const std::filesystem::path& file, const AppendRun& r);
AppendRun read_append_result(const std::filesystem::path& file);

// `mla __child append`: calls the plug-in's append `repeats` (>= 2) times, each on a fresh copy
// of the cache, and writes the first call's outcome plus any difference between the calls.
int child_append(const std::filesystem::path& plugin, const std::filesystem::path& inputs,
                 const std::filesystem::path& result, int repeats);

// Fills r.verdict, r.reasons and r.out (latent) / r.lse (k_pe) comparisons.
void judge_append(const AppendCase& c, const AppendRun& run, reports::CaseResult& r);

}  // namespace mla::certify
