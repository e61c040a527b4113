// L1: every example plug-in (kernels/plugin/examples) certified through the CLI on the real
// catalog, as a user would run it. Each broken plug-in must certify red exactly where its bug
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
    if (skipped_for_size(c) || c.family == "fresh") continue;
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
    if (skipped_for_size(c) || c.family == "fresh") continue;
    const auto p = mla::certify::testing::predict_dropped_last(load(c), mla::OutDType::f32);
    if (p.must_fail) {
      EXPECT_EQ(c.verdict, Verdict::fail) << p.why;
      const bool located = any_reason(c, "worst at [") || any_reason(c, "mask differs");
      EXPECT_TRUE(located) << reasons(c);
    }
    if (c.verdict == Verdict::fail) ++fails[c.family];
    // Whatever the verdict, the fault is the numbers: never a crash, never an audit finding.
    EXPECT_NE(c.verdict, Verdict::error) << reasons(c);
    for (const auto& why : c.reasons) EXPECT_TRUE(why.rfind("out: ", 0) == 0 || why.rfind("lse: ", 0) == 0) << why;
  }
  for (const auto& f : mla::golden::family_names(mla::golden::Certified::attention)) EXPECT_GT(fails[f], 0) << f;
}

TEST_F(CertifyPlugins, Base2LseFailsOnLseAlone) {
  const auto r = certify(plugins({"lse_log2"}) + " --family attn_core --family attn_sparse");
  EXPECT_EQ(r.status, 1) << r.stdout_text;
  int red = 0, green = 0;
  for (const auto& c : kernel(r, "lse_log2").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (skipped_for_size(c) || c.family == "fresh") continue;
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
      for (const auto& why : c.reasons) EXPECT_EQ(why.rfind("lse: ", 0), 0u) << "out is right, only lse is wrong: " << why;
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
    if (skipped_for_size(c) || c.family == "fresh") continue;
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

}  // namespace
