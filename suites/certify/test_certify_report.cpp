// L0: the certificate format (JSON round trip, Markdown, summary, atomic writes, machine
// facts) and mla-certify's exit codes on bad usage and broken catalogs. No golden needed.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <system_error>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "mla/certify/certify.hpp"
#include "mla/faults/faults.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/sha256.hpp"
#include "mla/core/text.hpp"
#include "mla/certify/golden_check.hpp"
#include "mla/certify/host_error.hpp"
#include "mla/certify/isolation.hpp"
#include "mla/certify/junit.hpp"
#include "mla/core/kernel.hpp"
#include "mla/reports/certificate.hpp"
#include "mla/reports/coverage.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::reports::CaseResult;
using mla::reports::Certificate;
using mla::reports::KernelReport;
using mla::tol::Verdict;

using mla::certify::testing::Proc;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
Proc run(const std::string& cmd) { return mla::certify::testing::run_command(cmd); }

// Comparisons from the real engine, so the certificate carries realistic metrics.
mla::tol::Comparison comparison(const std::string& what, const std::string& tol_name, double bump, uint64_t stream) {
  const std::vector<int64_t> shape{2, 1, 4, 512};
  std::vector<double> truth(2 * 4 * 512);
  mla::gen::fill_f64(7, stream, 0.0, 1.0, truth);
  auto impl = truth;
  impl[777] += bump;
  return mla::tol::judge(what, impl, truth, shape, mla::tol::lookup(tol_name));
}

Certificate sample_certificate() {
  Certificate c;
  c.tool_version = "0.1.0";
  c.started_utc = "2026-11-30T00:00:00Z";
  c.finished_utc = "2026-11-30T00:00:05Z";
  c.complete = true;
  c.wall_seconds = 5.25;
  c.machine = mla::reports::detect_machine(MLA_SOURCE_DIR);
  c.build = {{"compiler", "g++"}, {"build_type", "Release"}};
  c.options = {{"max_tokens", 4096}};
  c.goldens_dir = "/goldens";
  c.manifest = {{"attn_core.h5", std::string(64, 'a')}, {"attn_fp8.h5", std::string(64, 'b')}};
  c.notes = {"family attn_stress is not in the catalog"};

  KernelReport good;
  good.name = "cpu_good";
  good.backend = "cpu";
  good.description = "a kernel | with a pipe in its description";
  good.out_dtype = "f64";
  for (int i = 0; i < 3; ++i) {
    CaseResult r;
    r.family = "attn_core";
    r.file = "attn_core.h5";
    r.name = "case_" + std::to_string(i);
    r.description = "case number " + std::to_string(i);
    r.shape = {{"batch", 2}, {"heads", 4}};
    r.out = comparison("out", "attn.out.f64", 0.0, 1 + i);
    r.lse = comparison("lse", "attn.lse.f64", 0.0, 10 + i);
    r.verdict = Verdict::pass;
    r.run_seconds = 1e-3 * (i + 1);
    r.bytes = 1e6;
    r.flops = 2e6;
    good.cases.push_back(r);
  }
  CaseResult unsupported;
  unsupported.family = "attn_fp8";
  unsupported.file = "attn_fp8.h5";
  unsupported.name = "fp8_case";
  unsupported.verdict = Verdict::unsupported;
  unsupported.reasons = {"cache format fp8 not supported"};
  good.cases.push_back(unsupported);

  KernelReport bad = good;
  bad.name = "cpu_bad";
  bad.description = "wrong on purpose";
  bad.cases[1].out = comparison("out", "attn.out.f64", 0.5, 2);
  bad.cases[1].verdict = Verdict::fail;
  for (const auto& why : bad.cases[1].out->reasons) bad.cases[1].reasons.push_back("out: " + why);
  bad.cases[2].verdict = Verdict::error;
  bad.cases[2].out.reset();
  bad.cases[2].lse.reset();
  bad.cases[2].reasons = {"exception: boom"};
  bad.cases[3].out_vs_unquantized = comparison("out_vs_unquantized", "attn.fp8_quantization.info", 0.01, 3);

  KernelReport gpu;
  gpu.name = "cuda_thing";
  gpu.backend = "cuda";
  gpu.description = "needs a GPU";
  gpu.out_dtype = "bf16";
  gpu.unavailable = "no CUDA device";
  for (const auto& r : good.cases) {
    CaseResult s;
    s.family = r.family;
    s.file = r.file;
    s.name = r.name;
    s.verdict = Verdict::skipped;
    s.reasons = {"no CUDA device"};
    gpu.cases.push_back(s);
  }
  c.kernels = {good, bad, gpu};
  return c;
}

TEST(CertificateJson, RoundTripsAndContainsEveryCase) {
  const auto c = sample_certificate();
  const auto j = mla::reports::to_json(c);
  const auto text = j.dump(1);
  const auto parsed = nlohmann::json::parse(text);
  const auto back = mla::reports::certificate_from_json(parsed);
  EXPECT_EQ(mla::reports::to_json(back), j);

  ASSERT_EQ(parsed["kernels"].size(), 3u);
  for (std::size_t k = 0; k < c.kernels.size(); ++k) {
    const auto& cases = parsed["kernels"][k]["cases"];
    ASSERT_EQ(cases.size(), c.kernels[k].cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(cases[i]["case"], c.kernels[k].cases[i].name);
      EXPECT_EQ(cases[i]["verdict"], mla::tol::to_string(c.kernels[k].cases[i].verdict));
    }
  }
  EXPECT_EQ(parsed["verdict"], "FAIL");
  EXPECT_EQ(parsed["kernels"][1]["counts"]["FAIL"], 1);
  EXPECT_EQ(parsed["kernels"][1]["counts"]["ERROR"], 1);
  EXPECT_EQ(parsed["kernels"][2]["counts"]["SKIPPED"], 4);
  // The tolerances a certificate used travel with it, with their reasons.
  ASSERT_TRUE(parsed["tolerances"].contains("attn.out.f64"));
  EXPECT_FALSE(parsed["tolerances"]["attn.out.f64"]["why"].get<std::string>().empty());
  EXPECT_TRUE(parsed["tolerances"].contains("attn.fp8_quantization.info"));
}

TEST(CertificateJson, MalformedOrForeignJsonIsATypedError) {
  auto j = mla::reports::to_json(sample_certificate());
  auto missing = j;
  missing["kernels"][0]["cases"][0].erase("verdict");
  EXPECT_THROW(mla::reports::certificate_from_json(missing), mla::Error);
  auto future = j;
  future["format"] = 99;
  EXPECT_THROW(mla::reports::certificate_from_json(future), mla::Error);
  auto bad_verdict = j;
  bad_verdict["kernels"][0]["cases"][0]["verdict"] = "OK";
  EXPECT_THROW(mla::reports::certificate_from_json(bad_verdict), mla::Error);
}

TEST(CertificateMarkdown, HasATablePerKernelAndEveryReason) {
  const auto c = sample_certificate();
  const auto md = mla::reports::to_markdown(c);
  EXPECT_NE(md.find("# MLA attention certificate: FAIL"), std::string::npos);
  for (const auto& k : c.kernels) EXPECT_NE(md.find("\n## " + k.name + "\n"), std::string::npos) << k.name;
  for (int i = 0; i < 3; ++i) EXPECT_NE(md.find("| case_" + std::to_string(i) + " |"), std::string::npos);
  // The failing case's reason, the error and the unsupported reason are all spelled out.
  EXPECT_NE(md.find(c.kernels[1].cases[1].reasons.front()), std::string::npos);
  EXPECT_NE(md.find("exception: boom"), std::string::npos);
  EXPECT_NE(md.find("cache format fp8 not supported"), std::string::npos);
  EXPECT_NE(md.find("Unavailable on this machine: no CUDA device"), std::string::npos);
  // The worst element's index appears next to its error.
  EXPECT_NE(md.find("@ " + mla::tol::format_index(c.kernels[1].cases[1].out->max_abs_index)), std::string::npos);
  // A '|' in free text must not break the table.
  EXPECT_NE(md.find("a kernel \\| with a pipe"), std::string::npos);
  EXPECT_NE(md.find("## Tolerances applied"), std::string::npos);
  EXPECT_NE(md.find("| attn.out.f64 |"), std::string::npos);
  EXPECT_NE(md.find("information only"), std::string::npos);
  // Every table row has as many cells as its header.
  std::istringstream lines(md);
  std::string line;
  std::size_t header_cells = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("|", 0) != 0) {
      header_cells = 0;
      continue;
    }
    const auto unescaped = std::regex_replace(line, std::regex("\\\\\\|"), "");
    const auto cells = static_cast<std::size_t>(std::count(unescaped.begin(), unescaped.end(), '|'));
    if (header_cells == 0) header_cells = cells;
    EXPECT_EQ(cells, header_cells) << line;
  }
}

TEST(CertificateSummary, FitsOnAScreenAndNamesTheRedCases) {
  auto c = sample_certificate();
  // Many red cases: the summary must still fit.
  for (int i = 0; i < 200; ++i) {
    auto r = c.kernels[1].cases[1];
    r.name = "extra_" + std::to_string(i);
    c.kernels[1].cases.push_back(r);
  }
  const std::size_t max_lines = 40;
  const auto s = mla::reports::summary(c, max_lines);
  const auto n_lines = static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
  EXPECT_LE(n_lines, max_lines);
  EXPECT_EQ(s.rfind("mla-certify: FAIL", 0), 0u) << s;
  EXPECT_NE(s.find("cpu_bad"), std::string::npos);
  EXPECT_NE(s.find("attn_core/case_1"), std::string::npos);
  EXPECT_NE(s.find("more (see the certificate)"), std::string::npos);
  EXPECT_NE(s.find("closest to its bound"), std::string::npos);  // the all-pass kernel
  for (const auto& line : [&] {
         std::vector<std::string> v;
         std::istringstream in(s);
         for (std::string l; std::getline(in, l);) v.push_back(l);
         return v;
       }()) {
    EXPECT_LE(line.size(), 160u) << line;
  }

  auto green = sample_certificate();
  green.kernels.erase(green.kernels.begin() + 1);
  EXPECT_FALSE(mla::reports::is_red(green));
  EXPECT_EQ(mla::reports::summary(green).rfind("mla-certify: PASS", 0), 0u);
}

TEST(CertificateFiles, WrittenAtomicallyAndOverwritten) {
  TempDir tmp;
  const auto dir = tmp.path() / "nested" / "out";
  auto c = sample_certificate();
  mla::reports::write_certificate(c, dir);
  EXPECT_EQ(mla::reports::certificate_from_json(nlohmann::json::parse(slurp(dir / "certificate.json"))).kernels.size(), 3u);
  c.kernels.pop_back();
  mla::reports::write_certificate(c, dir);
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "certificate.json"))["kernels"].size(), 2u);
  EXPECT_EQ(slurp(dir / "certificate.md"), mla::reports::to_markdown(c));
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"certificate.json", "certificate.md"})) << "temporary files left behind";

  try {
    mla::reports::write_file_atomically(tmp.path() / "no" / "such" / "dir" / "x.json", "{}");
    FAIL() << "writing into a missing folder succeeded";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos) << e.what();
  }
}

TEST(MachineInfo, GitCommitIsReadFromTheRepositoryFiles) {
  TempDir tmp;
  const auto repo = tmp.path() / "repo";
  fs::create_directories(repo / ".git" / "refs" / "heads");
  fs::create_directories(repo / "a" / "b");
  const std::string loose(40, 'c'), packed(40, 'd');
  std::ofstream(repo / ".git" / "HEAD") << "ref: refs/heads/main\n";
  std::ofstream(repo / ".git" / "refs" / "heads" / "main") << loose << "\n";
  EXPECT_EQ(mla::reports::git_commit_of(repo / "a" / "b"), loose);
  // A ref only in packed-refs.
  std::ofstream(repo / ".git" / "HEAD") << "ref: refs/heads/packed\n";
  std::ofstream(repo / ".git" / "packed-refs") << "# pack-refs with: peeled\n" << packed << " refs/heads/packed\n";
  EXPECT_EQ(mla::reports::git_commit_of(repo), packed);
  // Detached HEAD.
  std::ofstream(repo / ".git" / "HEAD") << loose << "\n";
  EXPECT_EQ(mla::reports::git_commit_of(repo), loose);
  // Not a repository at all.
  EXPECT_FALSE(mla::reports::git_commit_of(fs::path("/proc/self")).has_value());

  // Cross-check with git itself on this source tree when git is installed.
  const auto git = run(std::string("git -C '") + MLA_SOURCE_DIR + "' rev-parse HEAD 2>/dev/null");
  if (git.status == 0 && git.out.size() >= 40) {
    EXPECT_EQ(mla::reports::git_commit_of(MLA_SOURCE_DIR), git.out.substr(0, 40));
  }
  const auto m = mla::reports::detect_machine(MLA_SOURCE_DIR);
  EXPECT_FALSE(m.hostname.empty());
  EXPECT_GT(m.threads, 0);
}

// ---- the binary: exit codes without a usable catalog ----------------------------------------

std::string exe() { return MLA_CERTIFY_EXE; }

TEST(CertifyCli, BadUsageExitsTwo) {
  TempDir tmp;
  EXPECT_EQ(run(exe() + " --no-such-flag 2>/dev/null").status, 2);
  EXPECT_EQ(run(exe() + " --goldens '" + tmp.path().string() + "' 2>/dev/null").status, 2) << "--out is required";
  EXPECT_EQ(run(exe() + " --help >/dev/null").status, 0);
  EXPECT_EQ(run(exe() + " --out x --repeat 0 2>/dev/null").status, 2);
}

TEST(CertifyCli, UnreadableCatalogExitsTwoAndWritesNothingMisleading) {
  TempDir tmp;
  const auto goldens = tmp.path() / "goldens";
  const auto out = tmp.path() / "out";
  fs::create_directories(goldens);
  // No manifest at all.
  auto p = run(exe() + " --goldens '" + goldens.string() + "' --out '" + out.string() + "' 2>&1");
  EXPECT_EQ(p.status, 2) << p.out;
  EXPECT_NE(p.out.find("MANIFEST"), std::string::npos) << p.out;
  // A manifest whose digest does not match the file.
  std::ofstream(goldens / "attn_core.h5") << "not an hdf5 file";
  std::ofstream(goldens / "MANIFEST.sha256") << std::string(64, '0') << "  attn_core.h5\n";
  p = run(exe() + " --goldens '" + goldens.string() + "' --out '" + out.string() + "' 2>&1");
  EXPECT_EQ(p.status, 2) << p.out;
  EXPECT_NE(p.out.find("attn_core.h5"), std::string::npos) << p.out;
  EXPECT_FALSE(fs::exists(out / "certificate.json")) << "a catalog that failed verification was certified";
}

// ---- the certificate's own verdict: INCOMPLETE, HOST_ERROR, coverage ------------------------

// A certificate of one green implementation: what an interrupted run had recorded so far.
Certificate green_only(bool complete) {
  auto c = sample_certificate();
  c.kernels.resize(1);
  c.complete = complete;
  return c;
}

TEST(CertificateVerdict, AnUnfinishedRunIsIncompleteInEveryForm) {
  const auto c = green_only(/*complete=*/false);
  EXPECT_EQ(mla::reports::overall(c), mla::reports::Overall::incomplete);
  EXPECT_EQ(mla::reports::exit_status(c), mla::reports::kExitIncomplete);
  const auto j = mla::reports::to_json(c);
  EXPECT_EQ(j["verdict"], "INCOMPLETE");
  EXPECT_EQ(j["kernels"][0]["verdict"], "INCOMPLETE");
  const auto md = mla::reports::to_markdown(c);
  EXPECT_EQ(md.rfind("# MLA attention certificate: INCOMPLETE\n", 0), 0u) << md.substr(0, 120);
  EXPECT_EQ(md.find("certificate: PASS"), std::string::npos);
  const auto sum = mla::reports::summary(c);
  EXPECT_EQ(sum.rfind("mla-certify: INCOMPLETE", 0), 0u) << sum;
  const auto xml = mla::certify::to_junit(c);
  EXPECT_NE(xml.find("name=\"run complete\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure message=\"INCOMPLETE: the run did not finish"), std::string::npos) << xml;
  EXPECT_NE(xml.find("failures=\"1\""), std::string::npos) << "the suite totals count the failing test case";

  // The same rows, finished: PASS, no INCOMPLETE test case.
  const auto done = green_only(/*complete=*/true);
  EXPECT_EQ(mla::reports::exit_status(done), mla::reports::kExitPass);
  EXPECT_EQ(mla::certify::to_junit(done).find("INCOMPLETE"), std::string::npos);
  // Red and unfinished: still INCOMPLETE (the exit says "finish it"), the red rows said.
  auto red = sample_certificate();
  red.complete = false;
  EXPECT_EQ(mla::reports::exit_status(red), mla::reports::kExitIncomplete);
  EXPECT_NE(mla::reports::to_markdown(red).find("Some results recorded so far are red."), std::string::npos);
}

TEST(CertificateVerdict, HostErrorIsNeverAPassAndNeverBlamed) {
  auto c = green_only(/*complete=*/true);
  auto& row = c.kernels[0].cases[1];
  row.verdict = Verdict::host_error;
  row.out.reset();
  row.lse.reset();
  row.reasons = {"the child was killed by SIGXFSZ (File size limit exceeded): a file grew past the file-size limit"};
  EXPECT_FALSE(mla::reports::is_red(c)) << "the machine failed, not the implementation";
  EXPECT_EQ(mla::reports::overall(c), mla::reports::Overall::incomplete);
  EXPECT_EQ(mla::reports::exit_status(c), mla::reports::kExitIncomplete);
  EXPECT_EQ(mla::reports::kernel_verdict(c.kernels[0], true), "INCOMPLETE");
  EXPECT_NE(mla::reports::headline(c.kernels[0], true).find("1 HOST_ERROR, to be rerun"), std::string::npos);
  const auto xml = mla::certify::to_junit(c);
  EXPECT_NE(xml.find("type=\"HOST_ERROR\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("some cases hit a HOST_ERROR"), std::string::npos) << xml;
  // It round-trips as itself.
  const auto back = mla::reports::certificate_from_json(mla::reports::to_json(c));
  EXPECT_EQ(back.kernels[0].cases[1].verdict, Verdict::host_error);
}

TEST(HostError, TheMachinesFailuresAreToldFromTheImplementations) {
  using mla::certify::ChildOutcome;
  ChildOutcome fsz;
  fsz.kind = ChildOutcome::Kind::signaled;
  fsz.signal = SIGXFSZ;
  EXPECT_TRUE(mla::certify::host_cause(fsz).has_value());
  ChildOutcome segv = fsz;
  segv.signal = SIGSEGV;
  EXPECT_FALSE(mla::certify::host_cause(segv).has_value()) << "a crash is the kernel's";
  ChildOutcome spawn;
  spawn.kind = ChildOutcome::Kind::spawn_failed;
  spawn.error = "fork: Resource temporarily unavailable";
  EXPECT_TRUE(mla::certify::host_cause(spawn).has_value());
  ChildOutcome tempfail;
  tempfail.kind = ChildOutcome::Kind::exited;
  tempfail.exit_code = mla::certify::kChildHostFailure;
  EXPECT_TRUE(mla::certify::host_cause(tempfail).has_value());
  ChildOutcome one = tempfail;
  one.exit_code = 1;
  EXPECT_FALSE(mla::certify::host_cause(one).has_value());
  ChildOutcome hung;
  hung.kind = ChildOutcome::Kind::timed_out;
  EXPECT_FALSE(mla::certify::host_cause(hung).has_value()) << "a hang is the kernel's";

  EXPECT_EQ(mla::certify::failure_verdict(std::bad_alloc()), Verdict::host_error);
  EXPECT_EQ(mla::certify::failure_verdict(mla::reports::WriteError("disk full", ENOSPC)), Verdict::host_error);
  EXPECT_EQ(mla::certify::failure_verdict(mla::reports::WriteError("too big", EFBIG)), Verdict::host_error);
  EXPECT_EQ(mla::certify::failure_verdict(std::system_error(EMFILE, std::generic_category())), Verdict::host_error);
  EXPECT_EQ(mla::certify::failure_verdict(mla::reports::WriteError("denied", EACCES)), Verdict::error);
  EXPECT_EQ(mla::certify::failure_verdict(mla::Error("bad golden")), Verdict::error);
}

// A kernel that claims bf16, dense, heads 1-16 and page 64, on a selection with more than that.
KernelReport narrow_claims() {
  mla::Capabilities caps;
  caps.cache_formats = {mla::CacheFormat::bf16};
  caps.min_heads = 1;
  caps.max_heads = 16;
  caps.page_sizes = {64};
  caps.dense = true;
  caps.sparse = false;
  KernelReport k;
  k.name = "narrow";
  k.backend = "plugin";
  k.out_dtype = "bf16";
  k.origin = {{"kind", "plugin"}, {"capabilities", mla::to_json(caps)}};
  auto row = [&](const std::string& name, const std::string& format, int topk, int heads, int page, Verdict v,
                 const std::string& why) {
    CaseResult r;
    r.family = "attn_core";
    r.file = "attn_core.h5";
    r.name = name;
    r.shape = {{"cache_format", format}, {"topk", topk}, {"heads", heads}, {"s_q", 1}, {"page_size", page}};
    r.verdict = v;
    if (!why.empty()) r.reasons = {why};
    k.cases.push_back(r);
  };
  for (int i = 0; i < 5; ++i) row("ok" + std::to_string(i), "bf16", 0, 1 + 3 * i, 64, Verdict::pass, "");
  row("fp8", "fp8", 0, 16, 64, Verdict::not_claimed, "cache format fp8 not supported");
  row("sparse", "bf16", 2048, 16, 64, Verdict::not_claimed, "sparse not supported");
  row("h128", "bf16", 0, 128, 64, Verdict::not_claimed, "heads=128 outside [1,16]");
  row("ps16", "bf16", 0, 16, 16, Verdict::not_claimed, "page size 16 not supported");
  return k;
}

TEST(Coverage, ANarrowClaimSaysSoInTheHeadline) {
  const auto k = narrow_claims();
  EXPECT_EQ(mla::reports::headline(k, true), "PASS on 5 of 9 cases (claims exclude: fp8, sparse, heads > 16, page 16)");
  const auto cov = mla::reports::coverage(k);
  EXPECT_FALSE(cov.full());
  EXPECT_EQ(cov.passed, 5);
  EXPECT_EQ(cov.not_claimed, 4);
  // The table puts the selection's range beside the claimed and the passed ones.
  bool heads_row = false;
  for (const auto& r : cov.table) {
    if (r.dimension != "heads") continue;
    heads_row = true;
    EXPECT_EQ(r.catalog, "1–128");
    EXPECT_EQ(r.claimed, "1–16");
    EXPECT_EQ(r.passed, "1–13");
  }
  EXPECT_TRUE(heads_row);

  Certificate c = green_only(true);
  c.kernels = {k};
  // Green, yet CI asked for full coverage: its own exit status.
  EXPECT_EQ(mla::reports::exit_status(c), mla::reports::kExitPass);
  EXPECT_EQ(mla::reports::exit_status(c, /*require_full_coverage=*/true), mla::reports::kExitCoverage);
  const auto md = mla::reports::to_markdown(c);
  EXPECT_NE(md.find("# MLA attention certificate: PASS: PASS on 5 of 9 cases (claims exclude: fp8, sparse, heads > 16, "
                    "page 16)"),
            std::string::npos)
      << md.substr(0, 300);
  EXPECT_NE(md.find("| heads | 1–128 | 1–16 | 1–13 |"), std::string::npos) << md;
  EXPECT_NE(mla::reports::summary(c).find("PASS on 5 of 9 cases (claims exclude:"), std::string::npos);
  const auto j = mla::reports::to_json(c);
  EXPECT_EQ(j["kernels"][0]["coverage"]["full"], false);
  EXPECT_EQ(j["kernels"][0]["counts"]["NOT_CLAIMED"], 4);
  EXPECT_NE(mla::certify::to_junit(c).find("<skipped message=\"NOT_CLAIMED: sparse not supported\"/>"), std::string::npos);

  // Everything claimed: full coverage.
  auto all = k;
  all.cases.resize(5);
  c.kernels = {all};
  EXPECT_EQ(mla::reports::exit_status(c, true), mla::reports::kExitPass);
  EXPECT_EQ(mla::reports::headline(all, true), "PASS on 5 of 5 cases");
}

// Format 1 certificates said UNSUPPORTED "not claimed: ..." for what is now NOT_CLAIMED.
TEST(CertificateJson, AFormatOneCertificateIsReadWithItsUnclaimedRowsNotClaimed) {
  auto j = mla::reports::to_json(sample_certificate());
  j["format"] = 1;
  j["kernels"][0]["cases"][3]["reasons"] = {"not claimed: cache format fp8 not supported"};
  const auto c = mla::reports::certificate_from_json(j);
  EXPECT_EQ(c.kernels[0].cases[3].verdict, Verdict::not_claimed);
  EXPECT_EQ(c.kernels[0].cases[3].reasons[0], "cache format fp8 not supported");
  EXPECT_EQ(c.kernels[1].cases[3].verdict, Verdict::unsupported) << "a refusal at run time stays UNSUPPORTED";
}

// A cache-append row: the stored latent and k_pe against their fp64 values.
CaseResult append_row() {
  CaseResult r;
  r.family = "cache_append";
  r.file = "cache_boundary.h5";
  r.name = "append/bf16/prefill";
  r.latent = comparison("latent", "cache.append.bf16", 0.0, 20);
  r.k_pe = comparison("k_pe", "cache.append.bf16", 0.0, 21);
  r.verdict = Verdict::pass;
  return r;
}

TEST(CertificateJson, AnAppendRowPublishesLatentAndKPeUnderTheirOwnNames) {
  auto c = sample_certificate();
  c.kernels[0].cases.push_back(append_row());
  const auto j = mla::reports::to_json(c);
  const auto& row = j["kernels"][0]["cases"].back();
  EXPECT_TRUE(row["out"].is_null() && row["lse"].is_null()) << row.dump();
  EXPECT_EQ(row["latent"]["what"], "latent");
  EXPECT_EQ(row["k_pe"]["what"], "k_pe");
  EXPECT_TRUE(j["kernels"][0]["cases"][0]["latent"].is_null()) << "an attention row has no latent";
  EXPECT_TRUE(j["tolerances"].contains("cache.append.bf16"));
  const auto back = mla::reports::certificate_from_json(j);
  const auto& r = back.kernels[0].cases.back();
  EXPECT_TRUE(r.latent && r.k_pe);
  EXPECT_FALSE(r.out || r.lse);
  EXPECT_EQ(mla::reports::to_json(back), j);
}

// Before append rows had fields of their own, their latent and k_pe were written as "out" and
// "lse"; such a certificate (a --resume or `mla merge` input) reads as if written now.
TEST(CertificateJson, AnAppendRowInTheFormerSpellingIsReadUnderItsOwnNames) {
  auto c = sample_certificate();
  c.kernels[0].cases.push_back(append_row());
  const auto now = mla::reports::to_json(c);
  auto j = now;
  for (auto& row : j["kernels"][0]["cases"]) {
    if (row["latent"].is_object()) row["out"] = row["latent"], row["lse"] = row["k_pe"];
    row.erase("latent");
    row.erase("k_pe");
  }
  ASSERT_EQ(j["kernels"][0]["cases"].back()["out"]["what"], "latent");
  const auto back = mla::reports::certificate_from_json(j);
  EXPECT_TRUE(back.kernels[0].cases.back().latent.has_value());
  EXPECT_FALSE(back.kernels[0].cases.back().out.has_value());
  EXPECT_TRUE(back.kernels[0].cases.front().out.has_value()) << "an attention row keeps its out";
  EXPECT_EQ(mla::reports::to_json(back), now);
}

// A damaged certificate names the field, by its path, and what was there.
TEST(CertificateJson, ADamagedFieldIsNamedByItsPath) {
  auto j = mla::reports::to_json(sample_certificate());
  j["kernels"][1]["cases"][2]["verdict"] = 7;
  try {
    mla::reports::certificate_from_json(j);
    FAIL() << "accepted";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernels[1].cases[2].verdict: expected a string, found the number 7"),
              std::string::npos)
        << e.what();
  }
  auto k = mla::reports::to_json(sample_certificate());
  k["machine"].erase("threads");
  try {
    mla::reports::certificate_from_json(k);
    FAIL() << "accepted";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("machine.threads: missing"), std::string::npos) << e.what();
  }
}

// A catalog of the given files (copied from fixtures/bad under new names) with its manifest.
fs::path catalog_of(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  fs::create_directories(dir);
  std::ofstream manifest(dir / "MANIFEST.sha256");
  for (const auto& [from, to] : files) {
    fs::copy_file(fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad" / from, dir / to);
    manifest << mla::sha256_file(dir / to) << "  " << to << "\n";
  }
  return dir;
}

// A case whose attributes disagree with its datasets is an ERROR naming the attribute, decided
// before any SKIPPED (--max-tokens) or NOT_CLAIMED decision is taken from those attributes.
TEST(CertifyCli, ACaseWhoseAttributesLieIsAnErrorBeforeAnySkip) {
  TempDir tmp;
  // lying_shape: q has 2 heads and batch 2 where the attributes say 1; huge_elements: batch
  // 1000000 in the attributes, 1 in the data.
  const auto goldens =
      catalog_of(tmp.path() / "g", {{"lying_shape.h5", "attn_core.h5"}, {"huge_elements.h5", "attn_core_big.h5"}});
  for (const std::string extra : {"--max-tokens 1", ""}) {
    SCOPED_TRACE(extra);
    const auto out = tmp.path() / ("out" + std::to_string(extra.size()));
    const auto p = run(exe() + " --goldens '" + goldens.string() + "' --out '" + out.string() +
                       "' --family attn_core --kernel cpu_mla_fp64 --fault bf16_only " + extra + " 2>&1");
    EXPECT_EQ(p.status, 1) << p.out;
    const auto c = mla::reports::certificate_from_json(nlohmann::json::parse(slurp(out / "certificate.json")));
    for (const auto& k : c.kernels) {
      ASSERT_EQ(k.cases.size(), 2u) << "every file of the family is certified";
      for (const auto& r : k.cases) {
        EXPECT_EQ(r.verdict, Verdict::error) << k.name << " " << r.file;
        ASSERT_FALSE(r.reasons.empty());
        const std::string want = r.file == "attn_core.h5" ? "heads=1 of the case attributes" : "batch=1000000";
        EXPECT_NE(r.reasons[0].find(want), std::string::npos) << r.reasons[0];
      }
    }
  }
}

// The catalog is read by each file's `family` attribute: a second file of a family is
// certified, a file of an unselected family is named in the notes.
TEST(CertifyCli, EveryFileOfASelectedFamilyIsCertifiedAndTheOthersNamed) {
  TempDir tmp;
  const auto goldens = catalog_of(tmp.path() / "g", {{"good/attn_core.h5", "attn_core.h5"},
                                                     {"good/attn_core.h5", "more_of_the_core.h5"},
                                                     {"good/attn_fp8.h5", "attn_fp8.h5"}});
  const auto out = tmp.path() / "out";
  const auto p = run(exe() + " --goldens '" + goldens.string() + "' --out '" + out.string() +
                     "' --kernel cpu_mla_fp64 --family attn_core 2>&1");
  EXPECT_EQ(p.status, 0) << p.out;
  const auto c = mla::reports::certificate_from_json(nlohmann::json::parse(slurp(out / "certificate.json")));
  std::set<std::string> files;
  for (const auto& r : c.kernels.at(0).cases) files.insert(r.file);
  EXPECT_EQ(files, (std::set<std::string>{"attn_core.h5", "more_of_the_core.h5"}));
  bool named = false;
  for (const auto& n : c.notes) named |= n.find("attn_fp8.h5 (family attn_fp8: not selected by --family)") != std::string::npos;
  EXPECT_TRUE(named) << nlohmann::json(c.notes).dump();
}

// The read-through child: a golden that kills or hangs it is refused naming the file and the
// signal, and the verdict is cached by the file's digest. The child here is a stand-in that
// dies the way libhdf5 does on the fuzzer's inputs (suites/fuzz/README.md, "Findings").
TEST(GoldenGate, AFileThatKillsOrHangsTheReaderIsRefusedAndCachedByDigest) {
  TempDir tmp;
  const auto count = tmp.path() / "runs";
  const auto segv = tmp.path() / "segv.sh";
  std::ofstream(segv) << "#!/bin/sh\necho run >> '" << count.string() << "'\nkill -SEGV $$\n";
  fs::permissions(segv, fs::perms::owner_all);
  const auto file = tmp.path() / "corrupt.h5";
  std::ofstream(file) << "bytes";
  mla::certify::GoldenGate gate(segv);
  const auto& c = gate.check(file, std::string(64, 'a'), mla::certify::GoldenDepth::read_through);
  EXPECT_EQ(c.kind, mla::certify::GoldenCheck::Kind::crashed);
  const auto why = mla::certify::GoldenGate::refusal(file, c);
  EXPECT_NE(why.find(file.string()), std::string::npos) << why;
  EXPECT_NE(why.find("SIGSEGV"), std::string::npos) << why;
  (void)gate.check(file, std::string(64, 'a'), mla::certify::GoldenDepth::read_through);
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(*std::make_unique<std::ifstream>(count)),
                       std::istreambuf_iterator<char>(), '\n'),
            1)
      << "the same bytes are read through once per run";
  (void)gate.check(file, std::string(64, 'b'), mla::certify::GoldenDepth::read_through);
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(*std::make_unique<std::ifstream>(count)),
                       std::istreambuf_iterator<char>(), '\n'),
            2)
      << "other bytes are read through again";

  const auto hang = tmp.path() / "hang.sh";
  std::ofstream(hang) << "#!/bin/sh\nexec sleep 30\n";
  fs::permissions(hang, fs::perms::owner_all);
  mla::certify::GoldenGate slow(hang, /*timeout_s=*/0.5);
  const auto& h = slow.check(file, std::string(64, 'c'), mla::certify::GoldenDepth::read_through);
  EXPECT_EQ(h.kind, mla::certify::GoldenCheck::Kind::crashed);
  EXPECT_NE(h.problem.find("timed out"), std::string::npos) << h.problem;

  // The real reader on a real golden: read through, its cases listed.
  mla::certify::GoldenGate real(MLA_CLI_EXE, mla::certify::GoldenGate::kDefaultTimeout, /*memory=*/{});
  const auto good = fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad" / "good" / "attn_core.h5";
  const auto& g = real.check(good, mla::sha256_file(good), mla::certify::GoldenDepth::read_through);
  EXPECT_EQ(g.kind, mla::certify::GoldenCheck::Kind::ok) << g.problem;
  EXPECT_EQ(g.family, "attn_core");
  EXPECT_FALSE(g.cases.empty());
}

// The memory across runs (golden_check.hpp): bytes that survived a read-through by this
// executable are not read through again by a later gate with the same memory; it holds nothing
// but that (no family, no case list), never a refusal, and other bytes or another executable
// are read through as if it were empty.
TEST(GoldenGate, TheMemoryAcrossRunsHoldsOnlyWhatSurvivedThisExecutable) {
  TempDir tmp;
  const auto memory = tmp.path() / "memory";
  const auto count = tmp.path() / "runs";
  auto runs = [&] {
    std::ifstream in(count);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  // The real child, behind a script that counts its runs.
  const auto reader = tmp.path() / "reader.sh";
  std::ofstream(reader) << "#!/bin/sh\necho run >> '" << count.string() << "'\nexec '" << MLA_CLI_EXE << "' \"$@\"\n";
  fs::permissions(reader, fs::perms::owner_all);
  const auto good = fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad" / "good" / "attn_core.h5";
  const auto digest = mla::sha256_file(good);
  using mla::certify::GoldenDepth;
  using mla::certify::GoldenGate;
  {
    GoldenGate first(reader, GoldenGate::kDefaultTimeout, memory);
    const auto& c = first.check(good, digest, GoldenDepth::read_through);
    ASSERT_EQ(c.kind, mla::certify::GoldenCheck::Kind::ok) << c.problem;
    EXPECT_EQ(c.family, "attn_core") << "read through by the child";
    EXPECT_FALSE(c.remembered);
  }
  EXPECT_EQ(runs(), 1);
  {
    GoldenGate later(reader, GoldenGate::kDefaultTimeout, memory);
    const auto& c = later.check(good, digest, GoldenDepth::read_through);
    EXPECT_EQ(c.kind, mla::certify::GoldenCheck::Kind::ok);
    EXPECT_TRUE(c.remembered);
    EXPECT_TRUE(c.family.empty() && c.cases.empty()) << "the memory holds no fact about the file's contents";
    EXPECT_EQ(runs(), 1) << "remembered: not read through again";
    // The full check is never taken from the memory: its callers read its case problems.
    (void)later.check(good, digest, GoldenDepth::full);
    EXPECT_EQ(runs(), 2);
  }
  {
    GoldenGate without(reader, GoldenGate::kDefaultTimeout, /*memory=*/{});
    (void)without.check(good, digest, GoldenDepth::read_through);
    EXPECT_EQ(runs(), 3) << "no memory, no remembering";
  }
  {
    // Another executable (here: the same script, rewritten) is not taken for this one.
    fs::remove(reader);
    std::ofstream(reader) << "#!/bin/sh\necho run >> '" << count.string() << "'\nexec '" << MLA_CLI_EXE << "' \"$@\"\n\n";
    fs::permissions(reader, fs::perms::owner_all);
    GoldenGate rebuilt(reader, GoldenGate::kDefaultTimeout, memory);
    (void)rebuilt.check(good, digest, GoldenDepth::read_through);
    EXPECT_EQ(runs(), 4) << "another executable reads it through again";
  }
  // A refusal is never remembered: a file that kills the reader is read through on every run.
  const auto segv = tmp.path() / "segv.sh";
  std::ofstream(segv) << "#!/bin/sh\necho run >> '" << count.string() << "'\nkill -SEGV $$\n";
  fs::permissions(segv, fs::perms::owner_all);
  const auto corrupt = tmp.path() / "corrupt.h5";
  std::ofstream(corrupt) << "bytes";
  for (int i = 0; i < 2; ++i) {
    GoldenGate gate(segv, GoldenGate::kDefaultTimeout, memory);
    EXPECT_EQ(gate.check(corrupt, std::string(64, 'd'), GoldenDepth::read_through).kind,
              mla::certify::GoldenCheck::Kind::crashed);
  }
  EXPECT_EQ(runs(), 6);
}

// An unreadable certificate in the report folder is kept under another name, never overwritten;
// a damaged field of one is named by its path.
TEST(CertifyCli, AnUnreadableCertificateIsMovedAsideNotOverwritten) {
  TempDir tmp;
  const auto goldens = catalog_of(tmp.path() / "g", {{"good/attn_core.h5", "attn_core.h5"}});
  const auto out = tmp.path() / "out";
  fs::create_directories(out);
  auto j = mla::reports::to_json(sample_certificate());
  j["kernels"][0]["cases"][1]["verdict"] = 7;
  const std::string damaged = j.dump(1);
  std::ofstream(out / "certificate.json") << damaged;
  const auto p = run(exe() + " --goldens '" + goldens.string() + "' --out '" + out.string() +
                     "' --kernel cpu_mla_fp64 --resume 2>&1");
  EXPECT_EQ(p.status, 0) << p.out;
  EXPECT_NE(p.out.find("kernels[0].cases[1].verdict: expected a string, found the number 7"), std::string::npos) << p.out;
  int aside = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().filename().string().rfind("certificate.json.unreadable-", 0) != 0) continue;
    ++aside;
    EXPECT_TRUE(slurp(e.path()) == damaged) << "kept byte for byte";
  }
  EXPECT_EQ(aside, 1);
  EXPECT_NO_THROW(mla::reports::certificate_from_json(nlohmann::json::parse(slurp(out / "certificate.json"))));
}

// What stands where a golden file should be is named: not "missing" for a link, FIFO or folder.
TEST(CertifyCli, AGoldenThatIsNotAFileIsNamedForWhatItIs) {
  TempDir tmp;
  const auto g = tmp.path() / "g";
  fs::create_directories(g);
  std::ofstream(g / "MANIFEST.sha256") << std::string(64, '0') << "  attn_core.h5\n";
  struct Kind {
    std::function<void()> make;
    std::string said;
  };
  const std::vector<Kind> kinds = {
      {[&] { fs::create_directory(g / "attn_core.h5"); }, "found a directory"},
      {[&] { ASSERT_EQ(mkfifo((g / "attn_core.h5").c_str(), 0600), 0); }, "found a FIFO"},
      {[&] { fs::create_symlink(g / "nowhere", g / "attn_core.h5"); }, "found a symbolic link to nothing"},
      {[&] { fs::create_directory_symlink(tmp.path(), g / "attn_core.h5"); }, "found a symbolic link to a directory"},
  };
  for (const auto& k : kinds) {
    SCOPED_TRACE(k.said);
    fs::remove_all(g / "attn_core.h5");
    k.make();
    const auto p = run(exe() + " --goldens '" + g.string() + "' --out '" + (tmp.path() / "out").string() + "' 2>&1");
    EXPECT_EQ(p.status, 2) << p.out;
    EXPECT_NE(p.out.find(k.said), std::string::npos) << p.out;
    fs::remove(g / "attn_core.h5");
  }
}

TEST(Text, OutsideBytesArePrintedEscapedAndValidTextUnchanged) {
  EXPECT_EQ(mla::printable("naïve kernel"), "naïve kernel");
  EXPECT_EQ(mla::printable(std::string("bad\xff\x1b[31m")), "bad\\xFF\\x1B[31m");
  EXPECT_TRUE(mla::is_utf8(mla::printable(std::string("\xc0\xaf"))));
  EXPECT_FALSE(mla::is_utf8(std::string("\xed\xa0\x80")));  // a surrogate
}

TEST(FaultKernels, EveryFaultKernelIsBuiltAndAnUnknownOneRefused) {
  EXPECT_THROW(mla::faults::make("no_such"), mla::Error);
  for (const auto& name : mla::faults::names()) {
    const auto k = mla::faults::make(name);
    ASSERT_NE(k, nullptr);
    EXPECT_FALSE(k->info().name.empty());
  }
}

}  // namespace
