// L1: the routes by which a kernel that computes nothing (or hides a bug) could get a green
// certificate, each through the C ABI, each red for the reason that names it:
//   refuses_unknown        returns the catalog's stored truth where it finds it and refuses every
//                          other call (a refusal of a claimed shape is a broken claim: FAIL), the
//                          call made between a stored case's calls (q negated) among them;
//   hides_overflow         the stored truth for stored cases, elsewhere exp() without the running
//                          maximum (the fresh twin of the q-std-100 case, the fresh large-q case and
//                          the call between a stored case's calls overflow it);
//   memo_by_shape          answers from a memo keyed on everything but q (the call made between a
//                          case's calls is judged against its own truth);
//   changes_q_then_refuses writes into q and refuses (the parent's audit is reported, FAIL).
// The correct plug-in beside them stays green, its twins and fresh cases included.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/golden/golden.hpp"
#include "mla/reports/certificate.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::kFresh;
using mla::certify::testing::plugin_path;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::reports::Cause;
using mla::tol::Verdict;

const fs::path kGoldens = mla::golden::default_goldens_dir();

struct Certified {
  int status = -1;
  std::string output;
  nlohmann::json json;
  mla::reports::Certificate cert;
};

Certified certify(const std::string& args) {
  TempDir tmp;
  const auto out = tmp.path() / "out";
  Certified c;
  const auto p = run_command(fmt::format("{} certify --goldens {} --out {} --max-tokens 16384 {} 2>&1", MLA_CLI_EXE,
                                         quote(kGoldens), quote(out), args));
  c.status = p.status;
  c.output = p.out;
  if (fs::exists(out / "certificate.json")) {
    c.json = nlohmann::json::parse(slurp(out / "certificate.json"));
    c.cert = mla::reports::certificate_from_json(c.json);
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
  throw std::runtime_error("no kernel " + name + " in the certificate:\n" + c.output);
}

bool any_reason(const mla::reports::CaseResult& r, const std::string& words) {
  return std::any_of(r.reasons.begin(), r.reasons.end(),
                     [&](const std::string& why) { return why.find(words) != std::string::npos; });
}
std::string reasons(const mla::reports::CaseResult& r) { return fmt::format("{}", fmt::join(r.reasons, " | ")); }
bool is_twin(const mla::reports::CaseResult& r) { return mla::certify::testing::is_twin(r.name); }

class Attacks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGoldens / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << kGoldens << " (generate it: ./mla.sh goldens)";
    }
  }
};

TEST_F(Attacks, RefusingWhatItCannotLookUpIsABrokenClaim) {
  const auto r = certify(plugins({"refuses_unknown", "good_plugin"}) + " --family attn_core --family " + kFresh);
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  int stored = 0, twins = 0, fresh = 0;
  for (const auto& c : kernel(r, "refuses_unknown").cases) {
    SCOPED_TRACE(c.family + "/" + c.name + ": " + reasons(c));
    if (c.verdict == Verdict::skipped) continue;
    // Every case: the twins and fresh cases it cannot look up, and the stored ones too, whose
    // other case called in between (q negated) is stored nowhere. Refused, and counted against
    // it with its words.
    EXPECT_EQ(c.verdict, Verdict::fail);
    EXPECT_EQ(c.cause, Cause::broken_claim);
    EXPECT_TRUE(any_reason(c, "refused a shape it claims")) << reasons(c);
    EXPECT_TRUE(any_reason(c, "unsupported shape")) << "the kernel's own words";
    twins += is_twin(c);
    fresh += c.family == kFresh;
    stored += c.family != kFresh && !is_twin(c);
  }
  EXPECT_GT(stored, 5);
  EXPECT_EQ(twins, stored) << "every stored case it runs has its twin";
  EXPECT_GT(fresh, 3);
  EXPECT_NE(kernel(r, "refuses_unknown").cases.size(), 0u);
  EXPECT_NE(r.json["kernels"][0]["headline"].get<std::string>().find("it refused every one of the"), std::string::npos)
      << r.json["kernels"][0]["headline"];
  for (const auto& c : kernel(r, "good_plugin").cases) {
    SCOPED_TRACE(c.family + "/" + c.name);
    if (c.verdict != Verdict::skipped) EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
  }
}

TEST_F(Attacks, ABugHiddenBehindTheStoredAnswersShowsOnTheTwinsAndTheFreshStressCase) {
  const auto r = certify(plugins({"hides_overflow"}) + " --family attn_stress --family " + kFresh + " --case 'q_std100|large_q'");
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.status, 1) << r.output;
  int stored_fail = 0, twin_fail = 0, fresh_fail = 0;
  for (const auto& c : kernel(r, "hides_overflow").cases) {
    SCOPED_TRACE(c.family + "/" + c.name + ": " + reasons(c));
    if (c.family == kFresh) fresh_fail += c.verdict == Verdict::fail;
    else if (is_twin(c)) twin_fail += c.verdict == Verdict::fail;
    else stored_fail += c.verdict == Verdict::fail && any_reason(c, "the other case called between calls");
  }
  // The stored rows get the stored answer, but the case called between their calls (q negated)
  // has none and overflows.
  EXPECT_EQ(stored_fail, 2) << "both stored q_std100 cases";
  EXPECT_EQ(twin_fail, 2) << "their twins have the same logit scale and no stored answer";
  EXPECT_EQ(fresh_fail, 1) << "the fresh large-q case";
}

TEST_F(Attacks, AMemoKeyedOnEverythingButQFailsOnTheCallMadeInBetween) {
  const auto r = certify(plugins({"memo_by_shape"}) + " --family attn_core --case 'h3_sq2_short|h16_varlen_ps16'");
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.status, 1) << r.output;
  int red = 0;
  for (const auto& c : kernel(r, "memo_by_shape").cases) {
    SCOPED_TRACE(c.family + "/" + c.name + ": " + reasons(c));
    EXPECT_EQ(c.verdict, Verdict::fail);
    EXPECT_TRUE(any_reason(c, "the other case called between calls")) << reasons(c);
    ++red;
  }
  EXPECT_EQ(red, 4) << "two cases and their twins";
}

TEST_F(Attacks, ChangingQThenRefusingIsRedWithTheAuditFinding) {
  const auto r = certify(plugins({"changes_q_then_refuses"}) + " --family attn_core --case 'h3_sq2_short$'");
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.status, 1) << r.output;
  const auto& cases = kernel(r, "changes_q_then_refuses").cases;
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name + ": " + reasons(c));
    EXPECT_EQ(c.verdict, Verdict::fail);
    EXPECT_TRUE(any_reason(c, "input q changed")) << "the parent's audit, whatever the child says";
  }
}

TEST_F(Attacks, ACertificateInWhichNothingWasJudgedIsNeverAPass) {
  // The plug-in claims up to 64 heads; the 128-head cases alone leave it nothing to judge.
  const auto r = certify(plugins({"underclaims"}) + " --family attn_core --case 'h128'");
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.json["verdict"], "NOT_JUDGED") << r.output;
  EXPECT_EQ(r.status, mla::reports::kExitCoverage) << r.output;
  EXPECT_NE(r.output.find("NOT_JUDGED"), std::string::npos) << r.output;
}

}  // namespace
