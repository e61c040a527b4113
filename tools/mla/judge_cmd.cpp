#include "judge_cmd.hpp"

#include <algorithm>
#include <ostream>

#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/golden_check.hpp"
#include "mla/certify/isolation.hpp"
#include "mla/core/attention.hpp"
#include "mla/core/conventions.hpp"
#include "mla/core/error.hpp"
#include "mla/core/precision.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/judge/attention.hpp"
#include "mla/judge/golden.hpp"

namespace mla::tools {
namespace {

namespace fx = mla::golden;

// The case of `key` loaded as the certifier loads it: the file verified against the manifest and
// read through in a child first (a file that crashes libhdf5 is refused, not read here).
fx::AttnCase load_case(const std::filesystem::path& dir, const std::string& key) {
  const auto slash = key.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == key.size() || key.find('/', slash + 1) != std::string::npos) {
    throw Error(fmt::format("--case '{}': expected <family>/<case>, e.g. attn_core/<case name>", key));
  }
  const std::string family = key.substr(0, slash), name = key.substr(slash + 1);
  const fx::Family* f = fx::find_family(family);
  if (!f || f->kind != fx::FamilyKind::attention) {
    throw Error(fmt::format("--case '{}': '{}' is not an attention family (attention families: {})", key, family,
                            fmt::join(fx::family_names(fx::FamilyKind::attention), ", ")));
  }
  const fx::Catalog cat = fx::open_catalog(dir, /*verify_files=*/false);
  if (!cat.sha256.count(f->file())) {
    throw Error(fmt::format("--case '{}': {} is not in the manifest of {}", key, f->file(), dir.string()));
  }
  fx::verify_file(cat, f->file());
  const auto path = cat.file(f->file());
  // Without the memory across runs: the child's case list and case problems are read below,
  // and the memory holds neither (golden_check.hpp).
  certify::GoldenGate gate(certify::self_executable(), certify::GoldenGate::kDefaultTimeout, /*memory=*/{});
  const auto& chk = gate.check(path, cat.sha256.at(f->file()), certify::GoldenDepth::read_through);
  if (chk.kind != certify::GoldenCheck::Kind::ok) {
    throw Error(chk.kind == certify::GoldenCheck::Kind::crashed ? certify::GoldenGate::refusal(path, chk) : chk.problem);
  }
  if (std::find(chk.cases.begin(), chk.cases.end(), name) == chk.cases.end()) {
    throw Error(fmt::format("--case '{}': {} has no case '{}' (cases: {})", key, f->file(), name, fmt::join(chk.cases, ", ")));
  }
  if (const auto p = chk.case_problems.find(name); p != chk.case_problems.end()) {
    throw Error(fmt::format("--case '{}': the case is refused: {}", key, p->second));
  }
  return fx::load_attn_case(path, name);
}

}  // namespace

nlohmann::json judge_result(const JudgeRequest& rq) {
  // The declaration first: a malformed word is the request's fault, whatever the files hold.
  Conventions conv;
  conv.lse_base = lse_base_from_string(rq.lse_base);
  conv.lse_layout = lse_layout_from_string(rq.lse_layout);
  conv.empty_row_lse = empty_row_lse_from_string(rq.empty_row_lse);
  std::optional<OutDType> declared_dtype;
  if (rq.out_dtype) declared_dtype = out_dtype_from_string(*rq.out_dtype);

  const fx::AttnCase c = load_case(rq.goldens.empty() ? fx::default_goldens_dir() : rq.goldens, rq.case_key);
  const AttnShape& s = c.shape;
  // lse as the implementation lays it out; outputs_to_canonical re-lays it as the judge reads it.
  const std::vector<int64_t> lse_shape = conv.lse_layout == LseLayout::b_h_sq
                                             ? std::vector<int64_t>{s.batch, s.heads, s.s_q}
                                             : std::vector<int64_t>{s.batch, s.s_q, s.heads};
  const auto res = fx::load_attn_result(rq.result, out_shape(s), lse_shape);
  AttnOutputs got{res.out_dtype, res.out, res.lse};
  outputs_to_canonical(conv, s, got);

  Declaration declared{declared_dtype.value_or(res.out_dtype), std::nullopt};
  if (rq.compute) {
    const PrecisionClass pc = precision_class_from_string(fmt::format("{}/{}", *rq.compute, to_string(declared.out_dtype)));
    declared.compute = ComputePrecision{pc.operands, pc.accumulate};
  }
  // The certifier's judge (certify/src/kinds/decode/run_case.cpp, judge_run): the same truth, the same entry
  // choice, the same rules.
  const GoldenTruth truth(c);
  const AttentionJudgement j = judge_attention(s, declared, got, truth.view());

  nlohmann::json out{
      {"case", rq.case_key},
      {"verdict", tol::to_string(j.pass() ? tol::Verdict::pass : tol::Verdict::fail)},
      {"reasons", j.reasons},
      {"declared",
       {{"out_dtype", to_string(declared.out_dtype)},
        {"produced", to_string(res.out_dtype)},
        {"precision", to_json(precision_class(declared.compute, got.dtype), declared.compute.has_value())},
        {"conventions", to_json(conv)}}},
      {"out", tol::to_json(j.out)},
      {"lse", tol::to_json(j.lse)},
      {"tolerances", {{"out", tol::to_json(tol::lookup(j.out.tolerance))}, {"lse", tol::to_json(tol::lookup(j.lse.tolerance))}}}};
  if (j.out_vs_unquantized) out["out_vs_unquantized"] = tol::to_json(*j.out_vs_unquantized);
  if (j.lse_vs_unquantized) out["lse_vs_unquantized"] = tol::to_json(*j.lse_vs_unquantized);
  return out;
}

CLI::App* add_judge_command(CLI::App& app, JudgeRequest& rq) {
  auto* judge = app.add_subcommand("judge", "judge one result written outside the certifier against a golden attention case, "
                                            "as `mla certify` judges it; JSON verdict (exit 0 PASS or FAIL, 2 bad input)");
  judge->add_option("--goldens", rq.goldens, "golden catalog folder (default: $MLA_GOLDENS_DIR or the build's)");
  judge->add_option("--case", rq.case_key, "<family>/<case> of an attention family, e.g. attn_core/h16_varlen_ps16")->required();
  judge->add_option("--result", rq.result,
                    "HDF5 file with datasets out [b,s_q,h,512] and lse, each with a dtype attribute "
                    "(out: bfloat16 as uint16 bits, float32 or float64; lse: float32 or float64)")
      ->required();
  judge->add_option("--out-dtype", rq.out_dtype, "the output dtype the implementation declares: f64, f32, bf16 (default: the stored one)");
  judge->add_option("--compute", rq.compute, "its declared operands/accumulation, e.g. bf16/f32 (default: undeclared)");
  judge->add_option("--lse-base", rq.lse_base, "its lse base: e or 2")->capture_default_str();
  judge->add_option("--lse-layout", rq.lse_layout, "its lse layout: [b,h,s_q] or [b,s_q,h]")->capture_default_str();
  judge->add_option("--empty-row-lse", rq.empty_row_lse, "its lse of a row that attends nothing: +inf or -inf")
      ->capture_default_str();
  return judge;
}

int run_judge(const JudgeRequest& rq, std::ostream& out, std::ostream& err) {
  try {
    out << judge_result(rq).dump(1) << "\n";
    return 0;
  } catch (const std::exception& e) {
    out.flush();
    err << "mla judge: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace mla::tools
