// L0: the certificate format (JSON round trip, Markdown, summary, atomic writes, machine
// facts) and mla-certify's exit codes on bad usage and broken catalogs. No golden needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "mla/certify/certify.hpp"
#include "mla/faults/faults.hpp"
#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/reports/certificate.hpp"
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

TEST(CertifyExtras, EveryFaultKernelIsBuiltAndAnUnknownOneRefused) {
  EXPECT_THROW(mla::faults::make("no_such"), mla::Error);
  for (const auto& name : mla::faults::names()) {
    const auto k = mla::faults::make(name);
    ASSERT_NE(k, nullptr);
    EXPECT_FALSE(k->info().name.empty());
  }
}

}  // namespace
