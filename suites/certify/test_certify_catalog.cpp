// L1: mla-certify on the real golden catalog.
//  * Every registered implementation certifies green (exit 0); the fp64 ones PASS every case
//    they support, and the certificate lists every selected case.
//  * A kernel that drops each sequence's last token certifies red, and exactly on the cases
//    where dropping that token must change the answer beyond the tolerance: the test predicts
//    that set from the case data itself (the dropped token's softmax weight), independently of
//    the kernel and of the certifier.
// Skipped (with the reason) when the catalog has not been generated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "mla/certify/certify.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "mla/faults/faults.hpp"
#include "mla/reports/certificate.hpp"
#include "test_predict.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::kFresh;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::tol::Verdict;

// L1 leaves out the generated long-context cases (32K and 128K tokens: most of the catalog's
// compute); the same tests built as test_certify_long (L2) run them (MLA_CERTIFY_MAX_TOKENS 0).
#ifndef MLA_CERTIFY_MAX_TOKENS
#define MLA_CERTIFY_MAX_TOKENS 16384
#endif
constexpr int64_t kMaxTokens = MLA_CERTIFY_MAX_TOKENS;
// CTest names tests by their gtest names: the two builds need different suite names.
#if MLA_CERTIFY_MAX_TOKENS == 0
#define CertifyCatalog CertifyFullCatalog
#endif

const fs::path kGoldens = mla::golden::default_goldens_dir();

bool catalog_present() { return fs::exists(kGoldens / "MANIFEST.sha256"); }

struct CaseId {
  std::string family, name;
  auto operator<=>(const CaseId&) const = default;
};

// Every attention case in the catalog with its header, in certification order.
std::vector<std::pair<CaseId, mla::golden::AttnHeader>> catalog_cases() {
  const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  std::vector<std::pair<CaseId, mla::golden::AttnHeader>> out;
  for (const auto& family : mla::golden::family_names_certified_by("decode")) {
    const auto file = catalog.file(family + ".h5");
    for (const auto& name : mla::golden::read_file_info(file).cases) {
      out.push_back({{family, name}, mla::golden::read_attn_header(file, name)});
    }
  }
  return out;
}

struct Certified {
  int status = -1;
  std::string stdout_text;
  nlohmann::json json;
  mla::reports::Certificate cert;
};

Certified certify(const std::string& args, const fs::path& out) {
  Certified c;
  const auto p = run_command(std::string(MLA_CERTIFY_EXE) + " --goldens " + quote(kGoldens) + " --out " + quote(out) +
                             " " + args);
  c.status = p.status;
  c.stdout_text = p.out;
  if (fs::exists(out / "certificate.json")) {
    c.json = nlohmann::json::parse(slurp(out / "certificate.json"));
    c.cert = mla::reports::certificate_from_json(c.json);
  }
  return c;
}

const mla::reports::KernelReport* kernel(const mla::reports::Certificate& c, const std::string& name) {
  for (const auto& k : c.kernels) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string max_tokens_arg() { return kMaxTokens > 0 ? "--max-tokens " + std::to_string(kMaxTokens) : ""; }
bool over_limit(const mla::golden::AttnHeader& h) { return kMaxTokens > 0 && h.cache_tokens() > kMaxTokens; }

// Each certification runs once per process, on first use: ctest runs every test in a process
// of its own, so a suite-wide setup would repeat both runs for every test.
class CertifyCatalog : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!catalog_present()) GTEST_SKIP() << "no golden catalog at " << kGoldens << " (generate it: ./mla.sh goldens)";
  }
  static const Certified& registered() {
    static TempDir dir;
    static const Certified c = certify(max_tokens_arg(), dir.path());
    return c;
  }
  static const std::string& dropped_name() {
    static const std::string name = mla::faults::make("dropped_last")->info().name;
    return name;
  }
  static const Certified& dropped() {
    static TempDir dir;
    static const Certified c =
        certify(max_tokens_arg() + " --fault dropped_last --kernel " + dropped_name(), dir.path());
    return c;
  }
};

TEST_F(CertifyCatalog, RegisteredImplementationsCertifyGreenOnEveryCase) {
  const auto& r = registered();
  EXPECT_EQ(r.status, 0) << r.stdout_text;
  ASSERT_FALSE(r.json.is_null()) << "no certificate written";
  EXPECT_TRUE(r.cert.complete);
  EXPECT_EQ(r.json["verdict"], "PASS");
  EXPECT_EQ(r.stdout_text.rfind("mla-certify: PASS", 0), 0u) << r.stdout_text;

  // Every catalog case appears for every implementation; the large ones as SKIPPED saying why.
  const auto cases = catalog_cases();
  for (const auto& k : r.cert.kernels) {
    SCOPED_TRACE(k.name);
    if (std::find(k.kinds.begin(), k.kinds.end(), "decode") == k.kinds.end()) {
      // A prefill or merge kernel: rows of its own kind only, every one green, or SKIPPED with
      // the reason when it cannot run here (cuda_merge without a device)
      // (test_certify_prefill_merge.cpp holds them case by case).
      ASSERT_FALSE(k.cases.empty());
      for (const auto& c : k.cases) {
        EXPECT_EQ(c.verdict, k.unavailable ? Verdict::skipped : Verdict::pass) << c.family << "/" << c.name;
        if (k.unavailable) {
          EXPECT_FALSE(c.reasons.empty()) << c.family << "/" << c.name << " skipped without a reason";
        }
      }
      continue;
    }
    // Then the fresh family, drawn at run time (test_certify_integrity.cpp holds it to its claims).
    ASSERT_GE(k.cases.size(), cases.size());
    for (std::size_t i = cases.size(); i < k.cases.size(); ++i) EXPECT_EQ(k.cases[i].family, kFresh);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto& got = k.cases[i];
      EXPECT_EQ(got.family, cases[i].first.family);
      EXPECT_EQ(got.name, cases[i].first.name);
      if (k.unavailable) {
        EXPECT_EQ(got.verdict, Verdict::skipped);
      } else if (over_limit(cases[i].second)) {
        EXPECT_EQ(got.verdict, Verdict::skipped);
        ASSERT_FALSE(got.reasons.empty());
        EXPECT_NE(got.reasons.front().find("--max-tokens"), std::string::npos);
      }
      if (got.verdict != Verdict::pass) {
        EXPECT_FALSE(got.reasons.empty()) << got.name << " has no reason";
      }
    }
  }

  // The fp64 implementations pass every case they support, and support every family.
  for (const std::string name : {"cpu_mla_fp64", "cpu_naive_mha_fp64"}) {
    SCOPED_TRACE(name);
    const auto* k = kernel(r.cert, name);
    ASSERT_NE(k, nullptr) << name << " is not registered";
    std::set<std::string> families_passed;
    for (const auto& c : k->cases) {
      EXPECT_TRUE(c.verdict == Verdict::pass || c.verdict == Verdict::not_claimed || c.verdict == Verdict::skipped)
          << c.family << "/" << c.name << ": " << (c.reasons.empty() ? "" : c.reasons.front());
      if (c.verdict == Verdict::pass) {
        families_passed.insert(c.family);
        ASSERT_TRUE(c.out && c.lse);
        EXPECT_EQ(c.out->tolerance, "attn.out.f64");
        EXPECT_LE(c.out->max_bound_use, 1.0);
        EXPECT_FALSE(c.out->error_ratio.has_value()) << "fp64 judged against the bf16 reference";
      }
      if (c.family == "attn_fp8" && c.verdict == Verdict::pass) {
        EXPECT_TRUE(c.out_vs_unquantized.has_value()) << "FP8 quantization error not recorded for " << c.name;
      }
    }
    for (const auto& f : mla::golden::family_names_certified_by("decode")) EXPECT_TRUE(families_passed.count(f)) << f;
  }

  // The table's why lines promise headroom over what these implementations measure (fp64:
  // 25x, fp32: 4x); hold them to at least 10x and 2x so a regression or a catalog change that
  // eats the margin shows up here, before it turns into a flaky verdict.
  const std::map<std::string, double> required_headroom{{"f64", 10.0}, {"f32", 2.0}};
  for (const auto& k : r.cert.kernels) {
    const auto need = required_headroom.find(k.out_dtype);
    if (need == required_headroom.end()) continue;
    for (const auto& c : k.cases) {
      if (c.verdict != Verdict::pass) continue;
      // The comparisons the row has (a top-k, an indexer append or logits row has none of out
      // and lse: its judge's rule is exact or its own).
      for (const auto* cmp : mla::reports::judged_comparisons(c)) {
        const auto& tol = mla::tol::lookup(cmp->tolerance);
        EXPECT_LE(cmp->max_bound_use * need->second, 1.0)
            << k.name << " " << c.family << "/" << c.name << " " << cmp->what << " uses " << cmp->max_bound_use
            << " of " << tol.name;
        EXPECT_LE(cmp->cos_diff * need->second * need->second, tol.cos_diff)
            << k.name << " " << c.family << "/" << c.name << " " << cmp->what << " cos diff " << cmp->cos_diff;
      }
    }
  }
}

TEST_F(CertifyCatalog, BadSelectionsAreUsageErrors) {
  if (kMaxTokens == 0) GTEST_SKIP() << "independent of the case sizes: run by the L1 build";
  TempDir tmp;
  const auto base = std::string(MLA_CERTIFY_EXE) + " --goldens " + quote(kGoldens) + " --out " + quote(tmp.path()) + " ";
  EXPECT_EQ(run_command(base + "--kernel no_such_kernel 2>/dev/null").status, 2);
  EXPECT_EQ(run_command(base + "--family attn_nope 2>/dev/null").status, 2);
  EXPECT_EQ(run_command(base + "--case '^no/such$' 2>/dev/null").status, 2);
  EXPECT_EQ(run_command(base + "--case '(' 2>/dev/null").status, 2);
  const auto fault = run_command(base + "--fault no_such 2>&1");
  EXPECT_EQ(fault.status, 2);
  EXPECT_NE(fault.out.find("unknown fault kernel 'no_such'"), std::string::npos) << fault.out;
  // The option's former name is still read as --fault (not refused as an unknown option).
  const auto former = run_command(base + "--kernel-extra no_such 2>&1");
  EXPECT_EQ(former.status, 2);
  EXPECT_NE(former.out.find("unknown fault kernel 'no_such'"), std::string::npos) << former.out;
}

// Each verdict path of the certifier, taken by a kernel built to take it; the run goes on
// through every case regardless. In this process (--in-process): the other tests cover the
// child-process path, this one the direct one.
TEST_F(CertifyCatalog, SelfTestKernelsTakeTheirPaths) {
  if (kMaxTokens == 0) GTEST_SKIP() << "independent of the case sizes: run by the L1 build";
  TempDir tmp;
  const auto r = certify(
      "--in-process --family attn_core --family attn_fp8 --repeat 2 --fault throws --fault leaky "
      "--fault bf16_only --kernel selftest_throws --kernel selftest_leaky --kernel selftest_bf16_only",
      tmp.path());
  EXPECT_EQ(r.status, 1) << r.stdout_text;
  ASSERT_FALSE(r.json.is_null());
  EXPECT_TRUE(r.cert.complete) << "an exception stopped the run";
  const auto* throws = kernel(r.cert, "selftest_throws");
  const auto* leaky = kernel(r.cert, "selftest_leaky");
  const auto* bf16_only = kernel(r.cert, "selftest_bf16_only");
  ASSERT_TRUE(throws && leaky && bf16_only);
  ASSERT_FALSE(throws->cases.empty());
  for (const auto& c : throws->cases) {
    EXPECT_EQ(c.verdict, Verdict::error) << c.name;
    ASSERT_FALSE(c.reasons.empty());
    EXPECT_NE(c.reasons.front().find("injected failure in run()"), std::string::npos) << c.reasons.front();
  }
  for (const auto& c : leaky->cases) {
    EXPECT_EQ(c.verdict, Verdict::fail) << c.name;
    const bool says = std::any_of(c.reasons.begin(), c.reasons.end(), [](const std::string& why) {
      return why.find("differs between repeated runs") != std::string::npos;
    });
    EXPECT_TRUE(says) << c.name;
  }
  int fp8 = 0;
  for (const auto& c : bf16_only->cases) {
    if (c.family == "attn_fp8") {
      ++fp8;
      EXPECT_EQ(c.verdict, Verdict::not_claimed) << c.name;
      ASSERT_FALSE(c.reasons.empty());
      EXPECT_NE(c.reasons.front().find("fp8"), std::string::npos) << c.reasons.front();
    } else {
      EXPECT_EQ(c.verdict, Verdict::pass) << c.name;
    }
  }
  EXPECT_GT(fp8, 0);
}

// ---- the dropped-last-token kernel: predicted red set (test_predict.hpp) -----------------

TEST_F(CertifyCatalog, DroppedLastTokenKernelFailsExactlyWhereTheTokenMatters) {
  const auto& r = dropped();
  EXPECT_EQ(r.status, 1) << "a broken kernel certified green:\n" << r.stdout_text;
  ASSERT_FALSE(r.json.is_null());
  EXPECT_EQ(r.json["verdict"], "FAIL");
  const auto* k = kernel(r.cert, dropped_name());
  ASSERT_NE(k, nullptr);
  EXPECT_NE(r.stdout_text.find(dropped_name()), std::string::npos) << r.stdout_text;

  const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  int predicted_fail = 0, predicted_pass = 0;
  std::map<std::string, int> fails_per_family;
  for (const auto& got : k->cases) {
    SCOPED_TRACE(got.family + "/" + got.name);
    if (got.verdict == Verdict::skipped) {
      EXPECT_NE(got.reasons.front().find("--max-tokens"), std::string::npos);
      continue;
    }
    if (mla::certify::testing::drawn_at_run_time(got.family, got.name)) continue;  // the prediction reads a golden case
    const auto c = mla::golden::load_attn_case(catalog.file(got.file), got.name);
    const auto p = mla::certify::testing::predict_dropped_last(c, mla::OutDType::f64);
    if (p.must_fail) {
      ++predicted_fail;
      EXPECT_EQ(got.verdict, Verdict::fail) << p.why;
      // The certificate says where: a failed rule with an element index, or a mask count.
      ASSERT_FALSE(got.reasons.empty());
      const bool located = std::any_of(got.reasons.begin(), got.reasons.end(), [](const std::string& why) {
        return why.find("worst at [") != std::string::npos || why.find("mask differs") != std::string::npos;
      });
      EXPECT_TRUE(located) << got.reasons.front();
      if (got.verdict == Verdict::fail) ++fails_per_family[got.family];
    } else if (p.must_pass) {
      ++predicted_pass;
      EXPECT_EQ(got.verdict, Verdict::pass) << p.why << "; " << (got.reasons.empty() ? "" : got.reasons.front());
    }
    std::cerr << "dropped_last " << got.family << "/" << got.name << ": " << mla::tol::to_string(got.verdict) << " ("
              << p.why << ")\n";
  }
  EXPECT_GT(predicted_fail, 0);
  // Every family with a non-empty sequence has a case the broken kernel gets wrong.
  for (const auto& f : mla::golden::family_names_certified_by("decode")) EXPECT_GT(fails_per_family[f], 0) << f;
  std::cerr << "dropped_last: " << predicted_fail << " cases must fail, " << predicted_pass
            << " cannot differ beyond tolerance\n";
}

}  // namespace
