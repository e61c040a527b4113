// L1: every example plug-in (kernels/plugin/examples, kernels/faults/plugins) certified through
// the CLI on the real catalog, as a user would run it. Each broken plug-in must certify red exactly where its bug
// shows, with the right reason, and each correct one green; the expected verdict of every case
// is computed here from the case's own data (test_predict.hpp), never read from a past run.
// Skipped (with the reason) when the catalog has not been generated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "mla/certify/certify.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/reports/certificate.hpp"
#include "test_predict.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::plugin_path;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::tol::Verdict;

const fs::path kGoldens = mla::golden::default_goldens_dir();
// The generated long-context cases are L2 material (test_certify_long).
constexpr int64_t kMaxTokens = 16384;

struct Certified {
  int status = -1;
  std::string stdout_text, junit;
  nlohmann::json json;
  mla::reports::Certificate cert;
};

Certified certify(const std::string& args) {
  TempDir dir;
  Certified c;
  const auto p = run_command(std::string(MLA_CLI_EXE) + " certify --goldens " + quote(kGoldens) + " --out " +
                             quote(dir.path()) + " --max-tokens " + std::to_string(kMaxTokens) + " " + args +
                             " 2>/dev/null");
  c.status = p.status;
  c.stdout_text = p.out;
  if (fs::exists(dir.path() / "certificate.json")) {
    c.json = nlohmann::json::parse(slurp(dir.path() / "certificate.json"));
    c.cert = mla::reports::certificate_from_json(c.json);
    c.junit = slurp(dir.path() / "certificate.junit.xml");
  }
  return c;
}

std::string plugins(std::initializer_list<const char*> names) {
  std::string s;
  for (const char* n : names) s += " --plugin " + plugin_path(n);
  return s;
}

const mla::reports::KernelReport& kernel(const Certified& c, const std::string& name) {
  for (const auto& k : c.cert.kernels) {
    if (k.name == name) return k;
  }
  throw std::runtime_error("no kernel " + name + " in the certificate");
}

// The case behind a result, loaded (without re-hashing) for a prediction.
mla::golden::AttnCase load(const mla::reports::CaseResult& r) {
  static const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  return mla::golden::load_attn_case(catalog.file(r.file), r.name);
}

bool any_reason(const mla::reports::CaseResult& r, const std::string& words) {
  return std::any_of(r.reasons.begin(), r.reasons.end(),
                     [&](const std::string& why) { return why.find(words) != std::string::npos; });
}

std::string reasons(const mla::reports::CaseResult& r) { return fmt::format("{}", fmt::join(r.reasons, " | ")); }

bool skipped_for_size(const mla::reports::CaseResult& r) {
  return r.verdict == Verdict::skipped && any_reason(r, "--max-tokens");
}

class CertifyPlugins : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGoldens / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << kGoldens << " (generate it: ./mla.sh goldens)";
    }
  }
};

TEST_F(CertifyPlugins, CorrectPluginsCertifyGreenInBothOutputDtypes) {
  // Every family for float32; the bf16 twin (same code, rounded output) on the dense families.
  const auto f32 = certify(plugins({"good_plugin"}));
  const auto bf16 = certify(plugins({"good_plugin_bf16"}) + " --family attn_core --family attn_fp8");
  for (const auto* name : {"good_plugin", "good_plugin_bf16"}) {
    const auto& r = std::string(name) == "good_plugin" ? f32 : bf16;
    EXPECT_EQ(r.status, 0) << r.stdout_text;
    ASSERT_FALSE(r.json.is_null());
    EXPECT_TRUE(r.cert.complete);
    const auto& k = kernel(r, name);
    const auto dtype = std::string(name) == "good_plugin" ? mla::OutDType::f32 : mla::OutDType::bf16;
    EXPECT_EQ(k.out_dtype, mla::to_string(dtype));
    int passed = 0;
    for (const auto& c : k.cases) {
      SCOPED_TRACE(fmt::format("{} {}/{}", name, c.family, c.name));
      if (skipped_for_size(c)) continue;
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
      ASSERT_TRUE(c.out.has_value());
      // Judged by the table entry of the dtype it declared, with the error ratio against the
      // bf16 reference (a lower-precision output is held to the deployed pipeline).
      const auto format = mla::cache_format_from_string(c.shape.at("cache_format").get<std::string>());
      EXPECT_EQ(c.out->tolerance, mla::tol::tolerance_for(dtype, format, "out").name);
      EXPECT_TRUE(c.out->error_ratio.has_value());
      ++passed;
    }
    EXPECT_GT(passed, 10) << name;
  }
}

TEST_F(CertifyPlugins, UnclaimedShapesAreNotedNotJudged) {
  const auto r = certify(plugins({"underclaims"}));
  EXPECT_EQ(r.status, 0) << "claiming less than it can do is not a failure: " << r.stdout_text;
  const auto& k = kernel(r, "underclaims");
  int claimed = 0, unclaimed = 0;
  for (const auto& c : k.cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c) || mla::certify::testing::drawn_at_run_time(c.family, c.name)) continue;
    // The plug-in claims the bf16 cache, dense attention and up to 64 heads.
    const bool claims = c.shape.at("cache_format") == "bf16" && c.shape.at("topk") == 0 && c.shape.at("heads") <= 64;
    if (claims) {
      ++claimed;
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
    } else {
      ++unclaimed;
      EXPECT_EQ(c.verdict, Verdict::not_claimed);
      ASSERT_EQ(c.reasons.size(), 2u) << reasons(c);
      EXPECT_EQ(c.reasons[1], "informational run on this unclaimed shape: PASS (handles it without claiming it)");
      EXPECT_FALSE(c.out.has_value()) << "an unclaimed shape is never part of the verdict";
    }
  }
  EXPECT_GT(claimed, 5);
  EXPECT_GT(unclaimed, 5);
  ASSERT_EQ(k.notes.size(), 1u);
  for (const auto* what : {"cache format fp8 not supported", "sparse not supported", "heads=128 outside [1,64]"}) {
    EXPECT_NE(k.notes[0].find(what), std::string::npos) << k.notes[0];
  }
  EXPECT_NE(r.junit.find("<skipped message=\"NOT_CLAIMED: sparse not supported\"/>"), std::string::npos);

  const auto quiet = certify(plugins({"underclaims"}) + " --family attn_sparse --no-probe-unclaimed");
  for (const auto& c : kernel(quiet, "underclaims").cases) {
    if (skipped_for_size(c)) continue;
    EXPECT_EQ(c.verdict, Verdict::not_claimed);
    EXPECT_EQ(c.reasons.size(), 1u) << reasons(c);
  }
  EXPECT_TRUE(kernel(quiet, "underclaims").notes.empty());
}

TEST_F(CertifyPlugins, DroppedLastTokenFailsWhereTheTokenMatters) {
  const auto r = certify(plugins({"drops_last_token"}));
  EXPECT_EQ(r.status, 1) << r.stdout_text;
  std::map<std::string, int> fails;
  for (const auto& c : kernel(r, "drops_last_token").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c) || mla::certify::testing::drawn_at_run_time(c.family, c.name)) continue;
    const auto p = mla::certify::testing::predict_dropped_last(load(c), mla::OutDType::f32);
    if (p.must_fail) {
      EXPECT_EQ(c.verdict, Verdict::fail) << p.why;
      const bool located = any_reason(c, "worst at [") || any_reason(c, "mask differs");
      EXPECT_TRUE(located) << reasons(c);
    }
    if (c.verdict == Verdict::fail) ++fails[c.family];
    // Whatever the verdict, the fault is the numbers: never a crash, never an audit finding.
    EXPECT_NE(c.verdict, Verdict::error) << reasons(c);
    for (const auto& w : c.reasons) {
      const auto why = mla::certify::testing::judged_rule(w);
      EXPECT_TRUE(why.rfind("out: ", 0) == 0 || why.rfind("lse: ", 0) == 0) << w;
    }
  }
  for (const auto& f : mla::golden::family_names_certified_by("decode")) EXPECT_GT(fails[f], 0) << f;
}

TEST_F(CertifyPlugins, Base2LseFailsOnLseAlone) {
  const auto r = certify(plugins({"lse_log2"}) + " --family attn_core --family attn_sparse");
  EXPECT_EQ(r.status, 1) << r.stdout_text;
  int red = 0, green = 0;
  for (const auto& c : kernel(r, "lse_log2").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c) || mla::certify::testing::drawn_at_run_time(c.family, c.name)) continue;
    const auto cs = load(c);
    // lse/ln2 differs from lse by 0.44·|lse|: beyond the bound wherever a finite lse is not ~0.
    const auto& t = mla::tol::tolerance_for(mla::OutDType::f32, cs.shape.cache_format, "lse");
    bool must_fail = false;
    for (double l : cs.truth_lse) {
      if (std::isfinite(l) && std::fabs(l) * (1 / std::log(2.0) - 1) > 2 * std::max(t.atol, t.rtol * std::fabs(l))) {
        must_fail = true;
      }
    }
    if (must_fail) {
      ++red;
      EXPECT_EQ(c.verdict, Verdict::fail);
      for (const auto& why : c.reasons) {
        EXPECT_EQ(mla::certify::testing::judged_rule(why).rfind("lse: ", 0), 0u) << "out is right, only lse is wrong: " << why;
      }
    } else {
      ++green;
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);  // e.g. every row empty: +inf either way
    }
  }
  EXPECT_GT(red, 5);
  EXPECT_GT(green, 0);
}

TEST_F(CertifyPlugins, ReadingAPoisonedSlotIsCaught) {
  // Dense families only: the bug is in the dense tail (sparse rows read listed positions).
  const auto r = certify(plugins({"reads_unused_slot"}) + " --family attn_core --family attn_fp8 --family attn_stress");
  EXPECT_EQ(r.status, 1) << r.stdout_text;
  int red = 0;
  for (const auto& c : kernel(r, "reads_unused_slot").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c) || mla::certify::testing::drawn_at_run_time(c.family, c.name)) continue;
    if (mla::certify::testing::has_poisoned_slot_in_owned_page(load(c))) {
      ++red;
      EXPECT_EQ(c.verdict, Verdict::fail);
      EXPECT_TRUE(any_reason(c, "out: NaN mask differs")) << reasons(c);
    } else {
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
    }
  }
  EXPECT_GT(red, 5);
}

// Crash, hang, out-of-bounds write, input mutation and unwritten output in one run: each case
// gets its own verdict and the run carries on to the end.
TEST_F(CertifyPlugins, AdversarialPluginsGetTheirVerdictsCaseByCase) {
  const auto r = certify(plugins({"crashes", "hangs", "writes_out_of_bounds", "mutates_input", "returns_nan"}) +
                         " --family attn_core --timeout 3");
  EXPECT_EQ(r.status, 1) << r.stdout_text;
  ASSERT_FALSE(r.json.is_null());
  EXPECT_TRUE(r.cert.complete);
  std::map<std::string, int> red;
  for (const auto& k : r.cert.kernels) {
    ASSERT_EQ(k.cases.size(), kernel(r, "crashes").cases.size()) << k.name;
    for (const auto& c : k.cases) {
      SCOPED_TRACE(k.name + " " + c.name);
      // The twins are scored by the mutation test: the predictions below read the stored data.
      if (mla::certify::testing::drawn_at_run_time(c.family, c.name)) continue;
      const auto cs = load(c);
      Verdict want = Verdict::pass;
      std::string words;
      if (k.name == "crashes" && mla::certify::testing::has_empty_sequence(cs)) {
        want = Verdict::error;
        words = "crashed: killed by signal SIGSEGV (Segmentation fault)";
      } else if (k.name == "hangs" && cs.shape.s_q == 4) {
        want = Verdict::error;
        words = "timed out after 3 s (killed)";
      } else if (k.name == "writes_out_of_bounds" && cs.shape.s_q == 2) {
        want = Verdict::fail;
        words = fmt::format("wrote {} bytes past out", cs.shape.d_v * sizeof(float));  // one output row
      } else if (k.name == "mutates_input") {
        want = Verdict::fail;
        words = "input q changed by call 1";
      } else if (k.name == "returns_nan") {
        want = Verdict::fail;
        words = "out: NaN mask differs";
      }
      EXPECT_EQ(c.verdict, want) << reasons(c);
      if (!words.empty()) {
        EXPECT_TRUE(any_reason(c, words)) << words << " not in: " << reasons(c);
        ++red[k.name];
        // The JUnit XML carries the same reason for the same testcase.
        const auto at = r.junit.find(fmt::format("classname=\"{}\" name=\"{}/{}\"", k.name, c.family, c.name));
        ASSERT_NE(at, std::string::npos);
        const auto end = r.junit.find("</testcase>", at);
        const auto element = r.junit.substr(at, end - at);
        EXPECT_NE(element.find(want == Verdict::error ? "<error" : "<failure"), std::string::npos) << element;
        EXPECT_NE(element.find(words.substr(0, 20)), std::string::npos) << element;
      }
    }
  }
  for (const auto* name : {"crashes", "hangs", "writes_out_of_bounds", "mutates_input", "returns_nan"}) {
    EXPECT_GT(red[name], 0) << name << " never showed its bug on attn_core";
  }
}

// ---- ABI 1.2 declarations -------------------------------------------------------------------

std::string plugin_arg(const char* path) { return " --plugin " + quote(path); }

std::string format_of(const mla::reports::CaseResult& c) { return c.shape.at("cache_format").get<std::string>(); }
bool fp32_scaled_fp8(const mla::reports::CaseResult& c) {
  return format_of(c) == "fp8" && c.shape.at("scale_fmt") == "fp32";
}

// A case the implementation does not claim: never judged, never counted against it.
bool not_claimed(const mla::reports::CaseResult& c) { return c.verdict == Verdict::not_claimed && !c.reasons.empty(); }

// A kernel that dequantizes FP8 into bf16 tiles and rounds P to bf16, writing float32: judged by
// the class it declares (bf16/f32/f32) it is correct; declared fp32 throughout, it is held to the
// fp32 bounds and fails where bf16 dequantization rounds (float32-scaled FP8 blocks).
TEST_F(CertifyPlugins, ABf16OperandKernelIsJudgedByTheClassItDeclares) {
  const mla::PrecisionClass bf16_ops{mla::OutDType::bf16, mla::OutDType::f32, mla::OutDType::f32};
  const auto good = certify(plugin_arg(MLA_PLUGIN_BF16_OPERANDS_F32_OUT) + " --family attn_core --family attn_fp8");
  EXPECT_EQ(good.status, 0) << good.stdout_text;
  const auto& k = kernel(good, "bf16_operands_f32_out");
  EXPECT_EQ(k.declared.at("precision"),
            (nlohmann::json{{"operands", "bf16"}, {"accumulate", "f32"}, {"output", "f32"}, {"declared", true}}));
  int fp32_scaled = 0;
  for (const auto& c : k.cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c)) continue;
    EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
    ASSERT_TRUE(c.out.has_value());
    const auto format = mla::cache_format_from_string(format_of(c));
    EXPECT_EQ(c.out->tolerance, mla::tol::tolerance_for(bf16_ops, format, "out").name);
    if (fp32_scaled_fp8(c)) ++fp32_scaled;
  }
  EXPECT_GE(fp32_scaled, 3);

  const auto wrong = certify(plugin_arg(MLA_PLUGIN_BF16_OPERANDS_DECLARED_F32) + " --family attn_fp8");
  EXPECT_EQ(wrong.status, 1) << wrong.stdout_text;
  int red = 0;
  for (const auto& c : kernel(wrong, "bf16_operands_declared_f32").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (!fp32_scaled_fp8(c) || skipped_for_size(c)) continue;
    ++red;
    EXPECT_EQ(c.verdict, Verdict::fail) << "the fp32 bounds let bf16 operand rounding through";
    ASSERT_TRUE(c.out.has_value());
    EXPECT_EQ(c.out->tolerance, "attn.out.f32");
    EXPECT_TRUE(any_reason(c, "out: ")) << reasons(c);
  }
  EXPECT_EQ(red, fp32_scaled);
}

// What FlashMLA's decode accepts, as the example's predicate states it.
bool flashmla_accepts(const nlohmann::json& shape) {
  const int topk = shape.at("topk"), heads = shape.at("heads"), page = shape.at("page_size");
  const bool fp8 = shape.at("cache_format") == "fp8";
  return (topk == 0 ? !fp8 : fp8) && (heads == 64 || heads == 128) && topk % 64 == 0 && page == 64;
}

// A FlashMLA-shaped kernel cannot state its domain in ranges and masks; with can_implement, every
// shape outside it is NOT_CLAIMED (in the kernel's own words, never run, never counted), and not
// one case comes back UNSUPPORTED from a call. Without the predicate the same decode refuses
// those shapes when called.
TEST_F(CertifyPlugins, AFlashMlaShapedKernelWithCanImplementClaimsExactlyItsDomain) {
  // attn_stress is left out: its cases are long (L2) or dense bf16 shapes attn_core already has.
  const auto r = certify(plugin_arg(MLA_PLUGIN_FLASHMLA_SHAPED) + " --family attn_core --family attn_fp8 --family attn_sparse");
  EXPECT_EQ(r.status, 0) << r.stdout_text;
  const auto& k = kernel(r, "flashmla_shaped");
  EXPECT_EQ(k.declared.at("can_implement"), true);
  int passed = 0, by_predicate = 0;
  for (const auto& c : k.cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c)) continue;
    if (flashmla_accepts(c.shape)) {
      ++passed;
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
      continue;
    }
    EXPECT_TRUE(not_claimed(c)) << to_string(c.verdict) << ": " << reasons(c);
    EXPECT_FALSE(c.out.has_value());
    // Inside the ranges (heads 64..128, page 64) only the predicate can refuse; outside them the
    // capabilities already did, and the predicate is never asked.
    const int heads = c.shape.at("heads");
    const bool in_ranges = heads >= 64 && heads <= 128 && c.shape.at("page_size") == 64;
    EXPECT_EQ(any_reason(c, "(the kernel's can_implement)"), in_ranges) << reasons(c);
    if (in_ranges) {
      ++by_predicate;
      EXPECT_EQ(c.reasons.size(), 1u) << "a shape the kernel refused is not run for information: " << reasons(c);
    }
  }
  EXPECT_GE(passed, 5);
  EXPECT_GT(by_predicate, 0);

  const auto bare = certify(plugin_arg(MLA_PLUGIN_FLASHMLA_SHAPED_NO_PREDICATE) + " --family attn_fp8 --family attn_sparse");
  int refused_when_called = 0;
  for (const auto& c : kernel(bare, "flashmla_shaped_no_predicate").cases) {
    if (c.verdict == Verdict::fail && c.cause == mla::reports::Cause::broken_claim) ++refused_when_called;
  }
  EXPECT_GT(refused_when_called, 0) << "without can_implement, the decode's refusals of shapes it claims are broken "
                                       "claims (FAIL)";
  EXPECT_EQ(bare.status, 1) << bare.stdout_text;
}

// A predicate that fails is a defect of the kernel, never a refusal: the cases whose claim it
// could not decide are its ERRORs, with what went wrong; the rest run as usual.
TEST_F(CertifyPlugins, ACanImplementThatFailsMakesErrorsNotRefusals) {
  const auto r = certify(plugin_arg(MLA_PLUGIN_BROKEN_CAN_IMPLEMENT) + " --family attn_core --family attn_sparse");
  EXPECT_EQ(r.status, 1) << r.stdout_text;
  int sparse = 0, crashed = 0, passed = 0;
  for (const auto& c : kernel(r, "broken_can_implement").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c)) continue;
    if (c.shape.at("topk") != 0) {
      ++sparse;
      EXPECT_EQ(c.verdict, Verdict::error);
      EXPECT_TRUE(any_reason(c, "can_implement returned")) << reasons(c);
      EXPECT_TRUE(any_reason(c, "sparse metadata table not initialized")) << reasons(c);
    } else if (c.shape.at("heads") == 128) {
      ++crashed;
      EXPECT_EQ(c.verdict, Verdict::error);
      EXPECT_TRUE(any_reason(c, "can_implement could not be asked: crashed")) << reasons(c);
    } else {
      ++passed;
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
    }
  }
  EXPECT_GT(sparse, 0);
  EXPECT_GT(crashed, 0);
  EXPECT_GT(passed, 0);
}

// FlashInfer's outputs (lse base 2, [b, s_q, h], -inf for an empty row) and global-slot sparse
// indices, declared: the host converts and the kernel certifies green, with the conventions in
// the certificate. The same code declaring nothing is read as canonical and fails.
TEST_F(CertifyPlugins, AFlashInferConventionKernelCertifiesGreenOnlyWhenItDeclaresItsConventions) {
  const std::string families = " --family attn_core --family attn_sparse";
  const auto good = certify(plugin_arg(MLA_PLUGIN_FLASHINFER_CONVENTIONS) + families);
  EXPECT_EQ(good.status, 0) << good.stdout_text;
  const auto& k = kernel(good, "flashinfer_conventions");
  EXPECT_EQ(k.declared.at("conventions"), (nlohmann::json{{"lse_base", "2"},
                                                          {"lse_layout", "[b,s_q,h]"},
                                                          {"empty_row_lse", "-inf"},
                                                          {"indices", "global_slots"}}));
  int sparse = 0, passed = 0;
  for (const auto& c : k.cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c)) continue;
    EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
    ++passed;
    if (c.shape.at("topk") != 0) ++sparse;
  }
  EXPECT_GT(passed, 10);
  EXPECT_GT(sparse, 3);

  const auto undeclared = certify(plugin_arg(MLA_PLUGIN_FLASHINFER_UNDECLARED) + families);
  EXPECT_EQ(undeclared.status, 1) << undeclared.stdout_text;
  for (const auto& c : kernel(undeclared, "flashinfer_undeclared").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c)) continue;
    if (c.shape.at("topk") == 0) {
      // Every case has a finite lse (base 2 is 0.69x too small) or an empty row (-inf, not +inf).
      EXPECT_EQ(c.verdict, Verdict::fail) << reasons(c);
      EXPECT_TRUE(any_reason(c, "lse: ")) << reasons(c);
    } else {
      // Positions read as global slots: the wrong tokens, or (an invalid position such as
      // INT_MAX taken for a slot) memory far outside the cache. Red either way.
      EXPECT_TRUE(c.verdict == Verdict::fail || c.verdict == Verdict::error) << reasons(c);
    }
  }
}

}  // namespace
