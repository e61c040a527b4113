// L1: a verdict the kernel under test cannot forge. Plug-ins that attack the certifier (rewrite
// what they can reach of the audit, change their answer on a later call, keep state across
// processes) and plug-ins with bugs only paged, repeated runs show (a read one token past the
// last, an ignored block table) are certified through the CLI and must be red exactly where
// their fault shows, for the reason that names it; the correct plug-in stays green beside them.
// Where a bug shows is computed from each case's own data (test_predict.hpp).
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/golden/golden.hpp"
#include "mla/reports/certificate.hpp"
#include "test_predict.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::kFresh;
using mla::certify::testing::Effect;
using mla::certify::testing::plugin_path;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::tol::Verdict;

const fs::path kGoldens = mla::golden::default_goldens_dir();

struct Certified {
  int status = -1;
  std::string output;
  nlohmann::json json;
  mla::reports::Certificate cert;
};

// `tmp` is the plug-ins' TMPDIR (state_across_processes keeps its file there).
Certified certify(const TempDir& tmp, const std::string& args) {
  const auto out = tmp.path() / "out";
  fs::remove_all(out);
  Certified c;
  const auto p = run_command("TMPDIR=" + quote(tmp.path()) + " " + std::string(MLA_CLI_EXE) + " certify --goldens " +
                             quote(kGoldens) + " --out " + quote(out) + " --max-tokens 16384 " + args + " 2>&1");
  c.status = p.status;
  c.output = p.out;
  if (fs::exists(out / "certificate.json")) {
    c.json = nlohmann::json::parse(slurp(out / "certificate.json"));
    c.cert = mla::reports::certificate_from_json(c.json);
  }
  return c;
}

const mla::reports::KernelReport& kernel(const Certified& c, const std::string& name) {
  for (const auto& k : c.cert.kernels) {
    if (k.name == name) return k;
  }
  throw std::runtime_error("no kernel " + name + " in the certificate");
}

bool any_reason(const mla::reports::CaseResult& r, const std::string& words) {
  return std::any_of(r.reasons.begin(), r.reasons.end(),
                     [&](const std::string& why) { return why.find(words) != std::string::npos; });
}
std::string reasons(const mla::reports::CaseResult& r) { return fmt::format("{}", fmt::join(r.reasons, " | ")); }
bool skipped_for_size(const mla::reports::CaseResult& r) {
  return r.verdict == Verdict::skipped && any_reason(r, "--max-tokens");
}

mla::golden::AttnCase load(const mla::reports::CaseResult& r) {
  static const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  return mla::golden::load_attn_case(catalog.file(r.file), r.name);
}

class Integrity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGoldens / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << kGoldens << " (generate it: ./mla.sh goldens)";
    }
  }
};

std::string plugins(std::initializer_list<const char*> names) {
  std::string s;
  for (const char* n : names) s += " --plugin " + plugin_path(n);
  return s;
}

TEST_F(Integrity, AttacksOnTheAuditAndStatefulKernelsAreRedForTheirFault) {
  TempDir tmp;
  const auto r = certify(tmp, plugins({"rewrites_audit", "changes_on_later_call", "state_across_processes", "good_plugin"}) +
                                  " --family attn_core --seed 7");
  EXPECT_EQ(r.status, 1) << r.output;
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.json["options"]["seed"], 7) << "the seed the run used is recorded";
  int cases = 0;
  for (const auto& c : kernel(r, "good_plugin").cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
    ++cases;
  }
  EXPECT_GT(cases, 5);
  for (const auto& c : kernel(r, "rewrites_audit").cases) {
    SCOPED_TRACE("rewrites_audit " + c.name);
    // It changes q, writes a row past out and answers differently from call 2 on, then zeroes
    // every shared page it can find and truncates every file on its command line: the parent's
    // own copies and snapshots still name all three faults.
    EXPECT_EQ(c.verdict, Verdict::fail) << reasons(c);
    EXPECT_TRUE(any_reason(c, "input q changed by call 1")) << reasons(c);
    EXPECT_TRUE(any_reason(c, "bytes past out")) << reasons(c);
    EXPECT_TRUE(any_reason(c, "out differs between repeated runs (call 1 vs call 2")) << reasons(c);
  }
  for (const auto& c : kernel(r, "changes_on_later_call").cases) {
    SCOPED_TRACE("changes_on_later_call " + c.name);
    // Right on its first two calls in a process: two calls of the case alone would pass it;
    // the call of another case in between makes the case's second call the plug-in's third.
    EXPECT_EQ(c.verdict, Verdict::fail) << reasons(c);
    EXPECT_TRUE(any_reason(c, "out differs between repeated runs (call 1 vs call 2 of ")) << reasons(c);
  }
  for (const auto& c : kernel(r, "state_across_processes").cases) {
    SCOPED_TRACE("state_across_processes " + c.name);
    // A twin runs in one process (its stored case is the one run in a second): nothing to see.
    if (mla::certify::testing::is_twin(c.name)) {
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
      continue;
    }
    // Consistent inside one process: only the second, fresh process shows it.
    EXPECT_EQ(c.verdict, Verdict::fail) << reasons(c);
    ASSERT_EQ(c.reasons.size(), 1u) << reasons(c);
    EXPECT_NE(c.reasons[0].find("out differs between repeated runs (first process vs a second, fresh one)"),
              std::string::npos)
        << reasons(c);
  }
}

TEST_F(Integrity, TheSeedDrawsTheCallCountsAndReproducesThem) {
  TempDir tmp;
  auto counts = [](const Certified& r) {
    std::vector<std::string> v;
    for (const auto& c : kernel(r, "changes_on_later_call").cases) v.push_back(reasons(c));
    return v;
  };
  const std::string args = plugins({"changes_on_later_call"}) + " --family attn_core";
  const auto a = certify(tmp, args + " --seed 11");
  const auto b = certify(tmp, args + " --seed 11");
  ASSERT_FALSE(a.json.is_null() || b.json.is_null()) << a.output << b.output;
  EXPECT_EQ(counts(a), counts(b)) << "--seed reproduces the run exactly";
  std::set<int> seen;
  for (const auto& c : kernel(a, "changes_on_later_call").cases) {
    for (int n = 3; n <= 5; ++n) {
      if (any_reason(c, fmt::format("of {})", n))) seen.insert(n);
    }
  }
  EXPECT_GE(seen.size(), 2u) << "the number of calls varies from case to case";
  const auto drawn = certify(tmp, args);
  ASSERT_TRUE(drawn.json["options"]["seed"].is_number_unsigned()) << drawn.json["options"].dump();
}

TEST_F(Integrity, ReadsPastTheLastTokenAndIgnoredBlockTableAreRedWhereTheyShow) {
  TempDir tmp;
  const auto r = certify(tmp, plugins({"reads_past_end", "ignores_block_table"}));
  EXPECT_EQ(r.status, 1) << r.output;
  ASSERT_FALSE(r.json.is_null()) << r.output;
  std::map<std::string, std::map<Effect, int>> seen;
  for (const auto* name : {"reads_past_end", "ignores_block_table"}) {
    for (const auto& c : kernel(r, name).cases) {
      SCOPED_TRACE(fmt::format("{} {}/{}", name, c.family, c.name));
      if (skipped_for_size(c) || mla::certify::testing::drawn_at_run_time(c.family, c.name)) continue;
      const auto cs = load(c);
      const Effect e = std::string(name) == "reads_past_end" ? mla::certify::testing::predict_reads_past_end(cs)
                                                             : mla::certify::testing::predict_ignores_block_table(cs);
      ++seen[name][e];
      if (e == Effect::none) {
        EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
      } else {
        EXPECT_TRUE(c.verdict == Verdict::fail || c.verdict == Verdict::error) << reasons(c);
      }
      if (std::string(name) == "reads_past_end" && e == Effect::faults) {
        // The access past the cache hits the guard page the parent put right after it.
        EXPECT_EQ(c.verdict, Verdict::error);
        EXPECT_TRUE(any_reason(c, "SIGSEGV") && any_reason(c, "past the end of kv_cache")) << reasons(c);
      }
      if (std::string(name) == "reads_past_end" && e == Effect::changes) {
        EXPECT_TRUE(any_reason(c, "NaN")) << reasons(c);
      }
    }
  }
  EXPECT_GT(seen["reads_past_end"][Effect::changes], 0);
  EXPECT_GT(seen["reads_past_end"][Effect::faults], 0);
  EXPECT_GT(seen["ignores_block_table"][Effect::changes] + seen["ignores_block_table"][Effect::faults], 3);
  EXPECT_GT(seen["ignores_block_table"][Effect::none], 0);
}

TEST_F(Integrity, ASetsidDoubleForkedProcessDoesNotOutliveItsCase) {
  TempDir tmp;
  const auto pidfile = tmp.path() / "daemon.pid";
  // The plug-in writes its daemon's pid where MLA_EXAMPLE_PIDFILE says.
  const auto r2 = run_command("MLA_EXAMPLE_PIDFILE=" + quote(pidfile) + " " + std::string(MLA_CLI_EXE) +
                              " certify --goldens " + quote(kGoldens) + " --out " + quote(tmp.path() / "out2") +
                              " --plugin " + plugin_path("leaves_daemon") + " --family attn_core --case h1_sq1 2>&1");
  EXPECT_EQ(r2.status, 0) << r2.out;
  ASSERT_TRUE(fs::exists(pidfile)) << "the plug-in left no daemon: " << r2.out;
  const pid_t daemon = std::stoi(slurp(pidfile));
  EXPECT_FALSE(mla::certify::testing::process_alive(daemon)) << "pid " << daemon << " outlived the run";
  if (mla::certify::testing::process_alive(daemon)) kill(daemon, SIGKILL);
}

}  // namespace

namespace {

// ---- the fresh family ----------------------------------------------------------------------

TEST_F(Integrity, FreshCasesAreDrawnInsideTheClaimsAndTheSeedReproducesThem) {
  TempDir tmp;
  // underclaims: bf16 cache, dense, 1..64 heads, any page size, varlen.
  const std::string args = plugins({"underclaims"}) + " --family " + kFresh + " --seed 3";
  const auto a = certify(tmp, args);
  const auto b = certify(tmp, args);
  ASSERT_FALSE(a.json.is_null() || b.json.is_null()) << a.output << b.output;
  EXPECT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(a.json["options"]["seed"], 3);
  const auto& ka = kernel(a, "underclaims");
  const auto& kb = kernel(b, "underclaims");
  ASSERT_EQ(ka.cases.size(), kb.cases.size());
  bool long_case = false, empty_rows = false;
  std::set<int> pages;
  for (std::size_t i = 0; i < ka.cases.size(); ++i) {
    const auto& c = ka.cases[i];
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.family, kFresh);
    EXPECT_EQ(c.name, kb.cases[i].name) << "--seed reproduces the same cases";
    if (!skipped_for_size(c)) {  // the 16K+ case is over this test's --max-tokens
      EXPECT_EQ(c.verdict, Verdict::pass) << reasons(c);
      ASSERT_TRUE(c.out.has_value() && kb.cases[i].out.has_value());
      EXPECT_EQ(c.out->max_abs_err, kb.cases[i].out->max_abs_err) << "and the same results";
    }
    // Inside the claims, every one.
    EXPECT_EQ(c.shape.at("cache_format"), "bf16");
    EXPECT_EQ(c.shape.at("topk"), 0);
    EXPECT_LE(c.shape.at("heads").get<int>(), 64);
    const auto lens = c.shape.at("cache_seqlens").get<std::vector<int>>();
    const int page = c.shape.at("page_size").get<int>(), s_q = c.shape.at("s_q").get<int>();
    pages.insert(page);
    for (const int L : lens) {
      long_case = long_case || L >= 16384;
      empty_rows = empty_rows || (s_q > 1 && L < s_q);
    }
    if (c.name.rfind("edges", 0) == 0) {
      EXPECT_EQ(lens, (std::vector<int>{0, 1, page - 1, page, page + 1}));
    }
  }
  EXPECT_TRUE(long_case) << "one context of at least 16K tokens";
  EXPECT_TRUE(empty_rows) << "s_q > 1 causal with rows that see nothing";
  EXPECT_EQ(pages, (std::set<int>{16, 64}));
}

TEST_F(Integrity, ABugTheFreshCasesShowMakesTheCertificateRed) {
  TempDir tmp;
  const auto r = certify(tmp, plugins({"reads_unused_slot"}) + " --family " + kFresh);
  EXPECT_EQ(r.status, 1) << r.output;
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  int red = 0;
  for (const auto& c : kernel(r, "reads_unused_slot").cases) red += c.verdict == Verdict::fail;
  EXPECT_GT(red, 0);
}

}  // namespace

namespace {

TEST_F(Integrity, StoredTruthPassesTheCatalogAndFailsTheFreshCases) {
  // reads_catalog computes nothing: it reads the certifier's --goldens from /proc/<parent>/cmdline
  // and returns the stored truth of the case whose q matches (zeros otherwise). Its answers to the
  // stored cases' own calls are right — that is what the fixed catalog alone cannot prevent —
  // and it is red because the fresh cases, the stored cases' twins and the call made between a
  // stored case's calls (q negated) exist nowhere before the run.
  TempDir tmp;
  const auto r = certify(tmp, plugins({"reads_catalog"}) + " --family attn_core --family " + kFresh);
  EXPECT_EQ(r.status, 1) << r.output;
  ASSERT_FALSE(r.json.is_null()) << r.output;
  EXPECT_EQ(r.json["verdict"], "FAIL");
  int stored_right = 0, fresh_fail = 0, fresh = 0;
  for (const auto& c : kernel(r, "reads_catalog").cases) {
    SCOPED_TRACE(c.family + "/" + c.name + ": " + reasons(c));
    if (skipped_for_size(c)) continue;
    EXPECT_EQ(c.verdict, Verdict::fail);
    if (c.family == kFresh) {
      ++fresh;
      fresh_fail += c.verdict == Verdict::fail;
    } else if (!mla::certify::testing::is_twin(c.name)) {
      // The case's own calls judged right (no out/lse reason of its own): only the call in
      // between gave it away.
      const bool only_between = std::all_of(c.reasons.begin(), c.reasons.end(), [](const std::string& w) {
        return w.find("the other case called between calls") != std::string::npos;
      });
      stored_right += only_between && c.out && c.out->verdict == Verdict::pass;
    }
  }
  EXPECT_GT(stored_right, 5) << "the theft works on the stored cases' own calls (so the test shows what stops it)";
  EXPECT_EQ(fresh_fail, fresh);
  EXPECT_GT(fresh, 3);
}

}  // namespace
