#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <iosfwd>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace mla::tools {

// `mla judge`: one result of an implementation that runs outside the certifier (a Python test's
// kernel) judged against a golden attention case by the certifier's own judge, so that a test
// in any language asks the one judge with the one tolerance table rather than restating them.
struct JudgeRequest {
  std::filesystem::path goldens;  // catalog folder (empty: mla::golden::default_goldens_dir())
  std::string case_key;           // "<family>/<case>", an attention family
  std::filesystem::path result;   // HDF5: /out, /lse (mla/golden/golden.hpp, load_attn_result)
  // The implementation's declaration as `mla certify` reads it from a kernel: its output dtype
  // (nullopt: the one the file stores), its operands/accumulation ("bf16/f32"; nullopt:
  // undeclared) and its conventions for lse (the words of mla/core/conventions.hpp).
  std::optional<std::string> out_dtype, compute;
  std::string lse_base = "e", lse_layout = "[b,h,s_q]", empty_row_lse = "+inf";
};

// {"case", "verdict" ("PASS" | "FAIL"), "reasons", "declared", "out", "lse" (the comparisons,
// with the entry's name, the measured errors and the bounds used), "tolerances" (the two table
// entries), and for an FP8 case "out_vs_unquantized", "lse_vs_unquantized" (information only)}.
// Throws mla::Error (FixtureError for the files) naming what is wrong with the request: an
// unknown or non-attention family, a missing case, an unreadable result or one of the wrong
// shape or dtype, a declaration the suite cannot judge.
nlohmann::json judge_result(const JudgeRequest& request);

// `mla judge`'s options, filling `request`, on `app`; the subcommand is returned for dispatch.
CLI::App* add_judge_command(CLI::App& app, JudgeRequest& request);
// Prints the judgement (JSON) to `out` and returns 0 whatever the verdict; for a request that
// cannot be judged, prints "mla judge: <what is wrong>" to `err` and returns 2.
int run_judge(const JudgeRequest& request, std::ostream& out, std::ostream& err);

}  // namespace mla::tools
