// L1: fault tests. What goes wrong around a certification — a report folder that
// cannot be written, goldens changed or deleted while the run is going, kernels that crash,
// hang, return NaN or write outside their output, a certifier killed halfway — must end in a
// clear verdict or error, a certificate that is still written, and `--resume` reproducing
// exactly what an uninterrupted run records.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "mla/core/sha256.hpp"
#include "mla/golden/golden.hpp"
#include "mla/reports/certificate.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::kFresh;
using mla::certify::testing::plugin_path;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::kernel;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::certify::testing::without_timings;
using nlohmann::json;

const fs::path kGoldens = mla::golden::default_goldens_dir();
const std::string kMla = MLA_CLI_EXE;

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kGoldens / "MANIFEST.sha256")) {
      GTEST_SKIP() << "no golden catalog at " << kGoldens << " (generate it: ./mla.sh goldens)";
    }
  }
};

struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
  json cert;
};

Run certify(const fs::path& out, const std::string& args, const fs::path& goldens = kGoldens, const std::string& env = "") {
  Run r;
  const auto p = run_command(env + " " + kMla + " certify --goldens " + quote(goldens) + " --out " + quote(out) + " " +
                             args + " 2>&1");
  r.status = p.status;
  r.output = p.out;
  if (fs::exists(out / "certificate.json")) r.cert = json::parse(slurp(out / "certificate.json"));
  return r;
}

int kept_count(const std::string& output) {
  std::smatch m;
  static const std::regex re("resume: kept (\\d+) of (\\d+) results");
  if (!std::regex_search(output, m, re)) return -1;
  return std::stoi(m[1]);
}

TEST_F(Faults, UnwritableReportFolderIsRefusedBeforeAnyWork) {
  TempDir tmp;
  const auto file = tmp.path() / "a_file";
  std::ofstream(file) << "not a folder\n";
  // Tests run as root, so permissions cannot make a folder unwritable: a path through a
  // regular file can never be created by anyone.
  const auto inside = file / "report";
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = certify(inside, "--plugin " + plugin_path("hangs") + " --timeout 30", "/no/such/catalog");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(inside.string()), std::string::npos) << "the error names the folder: " << r.output;
  // Checked first: neither the (missing) catalog nor a kernel was looked at.
  EXPECT_EQ(r.output.find("catalog"), std::string::npos) << r.output;
  EXPECT_LT(took, 10.0);
  const auto same = certify(file, "", kGoldens);
  EXPECT_EQ(same.status, 2) << same.output;
  EXPECT_NE(same.output.find(file.string()), std::string::npos) << same.output;
  EXPECT_EQ(slurp(file), "not a folder\n");
}

TEST_F(Faults, GoldenChangedOrDeletedMidRunIsAnErrorForItsCasesOnly) {
  TempDir tmp;
  const auto cat = tmp.path() / "goldens";
  fs::create_directories(cat);
  const auto original = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  std::ofstream manifest(cat / "MANIFEST.sha256");
  for (const char* f : {"attn_core.h5", "attn_fp8.h5", "attn_sparse.h5"}) {
    fs::copy(kGoldens / f, cat / f);
    manifest << original.sha256.at(f) << "  " << f << "\n";
  }
  manifest.close();
  // The plug-in edits attn_fp8.h5 and deletes attn_sparse.h5 on its first call, during the
  // first attn_core case: after the manifest was verified, before those files are read.
  const auto env = "MLA_EXAMPLE_TAMPER=" + quote(fmt::format("change:{};delete:{}", (cat / "attn_fp8.h5").string(),
                                                             (cat / "attn_sparse.h5").string()));
  const auto out = tmp.path() / "out";
  const auto r = certify(out, "--plugin " + plugin_path("tampers_with_goldens") + " --plugin " + plugin_path("good_plugin") +
                                  " --max-tokens 16384",
                         cat, env);
  EXPECT_EQ(r.status, 1) << r.output;
  ASSERT_FALSE(r.cert.is_null());
  EXPECT_TRUE(r.cert["complete"].get<bool>());
  EXPECT_FALSE(fs::exists(cat / "attn_sparse.h5")) << "the tampering did not happen";
  EXPECT_NE(mla::sha256_file(cat / "attn_fp8.h5"), original.sha256.at("attn_fp8.h5"));
  // The certificate records the catalog as verified at the start.
  EXPECT_EQ(r.cert["catalog"]["manifest"]["attn_fp8.h5"], original.sha256.at("attn_fp8.h5"));
  std::map<std::string, int> seen;
  for (const auto* name : {"tampers_with_goldens", "good_plugin"}) {
    for (const auto& c : kernel(r.cert, name)["cases"]) {
      if (c["family"] == kFresh) continue;  // drawn at run time: no golden file to tamper with
      SCOPED_TRACE(fmt::format("{} {}/{}", name, c["family"].get<std::string>(), c["case"].get<std::string>()));
      ++seen[c["family"]];
      const auto first = c["reasons"].empty() ? std::string() : c["reasons"][0].get<std::string>();
      if (c["family"] == "attn_core") {
        EXPECT_EQ(c["verdict"], "PASS") << first;
      } else {
        EXPECT_EQ(c["verdict"], "ERROR");
        EXPECT_NE(first.find("failed re-verification before loading"), std::string::npos) << first;
        EXPECT_NE(first.find(c["family"] == "attn_fp8" ? "sha256" : "missing"), std::string::npos) << first;
      }
    }
  }
  EXPECT_GT(seen["attn_core"], 0);
  EXPECT_GT(seen["attn_fp8"], 0);
  EXPECT_GT(seen["attn_sparse"], 0);
}

// A partial certificate: the first `keep` cases of every kernel, as a run stopped there leaves it.
json truncated(json cert, std::size_t keep) {
  cert["complete"] = false;
  cert["finished_utc"] = "";
  for (auto& k : cert["kernels"]) {
    auto& cases = k["cases"];
    while (cases.size() > keep) cases.erase(cases.size() - 1);
  }
  return cert;
}

TEST_F(Faults, ResumeReproducesAnUninterruptedRunExactly) {
  TempDir tmp;
  // (The hang and its timeout are resumed in KilledRunLeavesAPartialCertificateAndResumeFinishesIt.)
  const std::string args = "--plugin " + plugin_path("crashes") + " --plugin " + plugin_path("mutates_input") +
                           " --plugin " + plugin_path("returns_nan") + " --plugin " +
                           plugin_path("writes_out_of_bounds") + " --kernel cpu_mla_fp64 --family attn_core";
  const auto full = certify(tmp.path() / "full", args);
  ASSERT_EQ(full.status, 1) << full.output;
  ASSERT_TRUE(full.cert["complete"].get<bool>());
  std::size_t total = 0;
  for (const auto& k : full.cert["kernels"]) total += k["cases"].size();
  const std::size_t n_kernels = full.cert["kernels"].size();
  ASSERT_EQ(n_kernels, 5u);

  // Resumed from the first 4 cases of each kernel: the same certificate, and only the rest ran.
  const auto dir = tmp.path() / "resumed";
  fs::create_directories(dir);
  std::ofstream(dir / "certificate.json") << truncated(full.cert, 4).dump(1);
  const auto resumed = certify(dir, args + " --resume");
  EXPECT_EQ(resumed.status, 1) << resumed.output;
  EXPECT_EQ(kept_count(resumed.output), static_cast<int>(4 * n_kernels)) << resumed.output;
  EXPECT_EQ(without_timings(resumed.cert), without_timings(full.cert));
  // The JUnit XML is regenerated from the whole certificate, kept results included.
  const auto junit = slurp(dir / "certificate.junit.xml");
  EXPECT_NE(junit.find("SIGSEGV"), std::string::npos);
  EXPECT_NE(junit.find("wrote 2048 bytes past out"), std::string::npos);

  // A kernel whose version changed is rerun in full; the others keep their results.
  auto stale = truncated(full.cert, 4);
  for (auto& k : stale["kernels"]) {
    if (k["name"] == "returns_nan") k["version"] = "0.9.0";
  }
  const auto dir2 = tmp.path() / "stale";
  fs::create_directories(dir2);
  std::ofstream(dir2 / "certificate.json") << stale.dump(1);
  const auto rerun = certify(dir2, args + " --resume");
  EXPECT_EQ(kept_count(rerun.output), static_cast<int>(4 * (n_kernels - 1))) << rerun.output;
  EXPECT_EQ(without_timings(rerun.cert), without_timings(full.cert));

  // A complete certificate resumes to itself without running anything.
  const auto again = certify(tmp.path() / "full", args + " --resume");
  EXPECT_EQ(kept_count(again.output), static_cast<int>(total)) << again.output;
  EXPECT_EQ(without_timings(again.cert), without_timings(full.cert));

  // A narrower selection keeps the results outside it, and says so.
  const auto narrow = certify(tmp.path() / "full", args + " --case h1_ --resume");
  EXPECT_EQ(narrow.status, 1) << narrow.output;
  // One row of the selected case per kernel, and the plug-ins' twin of it.
  std::size_t selected_rows = 0;
  for (const auto& k : full.cert["kernels"]) {
    for (const auto& c : k["cases"]) selected_rows += c["case"].get<std::string>().rfind("h1_", 0) == 0;
  }
  EXPECT_EQ(selected_rows, 1 + 2 * (n_kernels - 1));
  EXPECT_NE(narrow.output.find(fmt::format("resume: keeping {} previous results of cases outside this selection",
                                           total - selected_rows)),
            std::string::npos)
      << narrow.output;
  auto rows = [](const json& cert) {
    std::multiset<std::string> r;
    for (const auto& k : cert["kernels"]) {
      for (const auto& c : k["cases"]) r.insert(k["name"].get<std::string>() + " " + c["file"].get<std::string>() + "/" +
                                                c["case"].get<std::string>() + " " + c["verdict"].get<std::string>());
    }
    return r;
  };
  EXPECT_EQ(rows(narrow.cert), rows(full.cert));
  bool noted = false;
  for (const auto& n : narrow.cert["notes"]) noted |= n.get<std::string>().find("outside this run's selection") != std::string::npos;
  EXPECT_TRUE(noted) << narrow.cert["notes"].dump();

  // A HOST_ERROR is never kept: --resume runs that case again.
  auto host = full.cert;
  host["kernels"][0]["cases"][1]["verdict"] = "HOST_ERROR";
  // As the certifier writes one: with the reason (a row without one is refused as edited).
  host["kernels"][0]["cases"][1]["reasons"] = json::array({"the certifier could not run a child process (fork failed)"});
  const auto dir3 = tmp.path() / "host";
  fs::create_directories(dir3);
  std::ofstream(dir3 / "certificate.json") << host.dump(1);
  const auto rehost = certify(dir3, args + " --resume");
  EXPECT_EQ(kept_count(rehost.output), static_cast<int>(total - 1)) << rehost.output;
  EXPECT_EQ(without_timings(rehost.cert), without_timings(full.cert));

  // Results judged under other options are not reused.
  const auto other = certify(dir, args + " --repeat 3 --case all_empty --resume");
  EXPECT_NE(other.output.find("not comparable"), std::string::npos) << other.output;
  EXPECT_EQ(kept_count(other.output), 0);
}

// Whether any process runs with `needle` in its command line.
bool any_process_mentions(const std::string& needle, const std::string& also = "") {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd.find(needle) != std::string::npos && cmd.find(also) != std::string::npos &&
        mla::certify::testing::process_alive(std::stoi(name))) {
      return true;
    }
  }
  return false;
}

TEST_F(Faults, KilledRunLeavesAPartialCertificateAndResumeFinishesIt) {
  TempDir tmp;
  // A private copy of the hanging plug-in: its path identifies this test's child processes.
  const auto hangs = tmp.path() / "hangs_copy.so";
  fs::copy(plugin_path("hangs"), hangs);
  const auto out = tmp.path() / "out";
  // The certifiers of this test keep their scratch folders in a temp folder of the test's own:
  // any other certifier (another test running at the same time) removes the folders of dead
  // certifiers it finds in its temp folder, which would take away what this test looks for.
  const auto scratch_root = tmp.path() / "tmp";
  fs::create_directories(scratch_root);
  const std::string env = "TMPDIR=" + quote(scratch_root);
  const std::string args = "--plugin " + quote(hangs) + " --family attn_core --timeout 5";
  const pid_t pid = mla::certify::testing::spawn_command(env + " exec " + kMla + " certify --goldens " + quote(kGoldens) +
                                                         " --out " + quote(out) + " " + args + " >/dev/null 2>&1");
  ASSERT_GT(pid, 0);
  // Wait until the run sits in the hanging case (its child is alive) with earlier cases recorded.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::size_t recorded = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(out / "certificate.json")) {
      try {
        recorded = json::parse(slurp(out / "certificate.json"))["kernels"][0]["cases"].size();
      } catch (const std::exception&) {
        recorded = 0;  // never half-written (atomic rename), but be safe
      }
    }
    // The three files are each replaced atomically but one after the other: wait for all.
    const bool all_written = fs::exists(out / "certificate.md") && fs::exists(out / "certificate.junit.xml");
    if (recorded > 0 && all_written && any_process_mentions(hangs.string())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(recorded, 0u) << "the run never got going";
  // A second run into the same folder is refused, naming the one that holds it.
  const auto second = certify(out, args, kGoldens, env);
  EXPECT_EQ(second.status, 2) << second.output;
  EXPECT_NE(second.output.find(fmt::format("is in use by another mla certify (pid {})", pid)), std::string::npos)
      << second.output;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int st = 0;
  waitpid(pid, &st, 0);

  // What was recorded is a valid certificate, marked incomplete.
  const auto partial = json::parse(slurp(out / "certificate.json"));
  EXPECT_FALSE(partial["complete"].get<bool>());
  // ...and it reads INCOMPLETE wherever a user or a CI looks, never PASS.
  EXPECT_EQ(partial["verdict"], "INCOMPLETE");
  const auto cert = mla::reports::certificate_from_json(partial);
  EXPECT_EQ(mla::reports::exit_status(cert), mla::reports::kExitIncomplete);
  const std::string md = slurp(out / "certificate.md");
  EXPECT_EQ(md.rfind("# MLA attention certificate: INCOMPLETE\n", 0), 0u) << md.substr(0, 200);
  const std::string junit = slurp(out / "certificate.junit.xml");
  EXPECT_NE(junit.find("<failure message=\"INCOMPLETE: the run did not finish"), std::string::npos) << junit;
  // The hung kernel's process died with the certifier (it is not left behind hanging).
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    gone = !any_process_mentions(hangs.string());
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "a child of the killed certifier is still running";

  // The killed certifier's scratch folder is still there...
  const std::string scratch = fmt::format("mla-certify-{}-", pid);
  auto scratch_left = [&] {
    for (const auto& e : fs::directory_iterator(scratch_root)) {
      if (e.path().filename().string().rfind(scratch, 0) == 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(scratch_left());

  const auto done = certify(out, args + " --resume", kGoldens, env);
  EXPECT_NE(done.output.find(fmt::format("taking over the lock of pid {}", pid)), std::string::npos) << done.output;
  EXPECT_FALSE(scratch_left()) << "...until the next certifier removes what a dead one left behind";
  EXPECT_EQ(done.status, 1) << done.output;
  EXPECT_EQ(kept_count(done.output), static_cast<int>(cert.kernels[0].cases.size())) << done.output;
  EXPECT_TRUE(done.cert["complete"].get<bool>());
  const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  // Every stored case and its fresh twin (the kernel is a plug-in).
  EXPECT_EQ(done.cert["kernels"][0]["cases"].size(), 2 * mla::golden::read_file_info(catalog.file("attn_core.h5")).cases.size());
  int timed_out = 0;
  for (const auto& c : done.cert["kernels"][0]["cases"]) {
    if (c["verdict"] == "ERROR") {
      EXPECT_EQ(c["reasons"][0], "timed out after 5 s (killed)");
      ++timed_out;
    } else {
      EXPECT_EQ(c["verdict"], "PASS") << c.dump();
    }
  }
  EXPECT_EQ(timed_out, 2) << "the hanging case and its twin";
}

}  // namespace

namespace {

// A run stopped by SIGTERM (a CI job cancelled, a pod evicted) finishes the case in progress,
// writes what it has and says INCOMPLETE everywhere: the JSON verdict, the Markdown heading, the
// summary on stdout, a failing JUnit test case, and its own exit status (3), never 0 or 1.
TEST_F(Faults, StoppedRunIsIncompleteEverywhereWithItsOwnExitStatus) {
  TempDir tmp;
  const auto hangs = tmp.path() / "hangs_stop.so";
  fs::copy(plugin_path("hangs"), hangs);
  const auto out = tmp.path() / "out";
  const auto log = tmp.path() / "stdout.txt";
  const pid_t pid = mla::certify::testing::spawn_command(
      "exec " + kMla + " certify --goldens " + quote(kGoldens) + " --out " + quote(out) + " --plugin " + quote(hangs) +
      " --family attn_core --timeout 3 >" + quote(log) + " 2>&1");
  ASSERT_GT(pid, 0);
  // In the hanging case: earlier cases recorded, and the child (not just the certifier, whose
  // command line names the plug-in too) alive.
  auto in_hanging_case = [&] {
    std::size_t recorded = 0;
    try {
      if (fs::exists(out / "certificate.json")) {
        recorded = json::parse(slurp(out / "certificate.json"))["kernels"][0]["cases"].size();
      }
    } catch (const std::exception&) {
    }
    return recorded > 0 && any_process_mentions(hangs.string(), "__child");
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && !in_hanging_case()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(in_hanging_case()) << "the run never reached its hanging case";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "the certifier died of the signal instead of stopping";
  EXPECT_EQ(WEXITSTATUS(st), mla::reports::kExitIncomplete) << slurp(log);
  const std::string text = slurp(log);
  EXPECT_NE(text.find("mla-certify: INCOMPLETE"), std::string::npos) << text;
  EXPECT_NE(text.find("stopped by SIGTERM"), std::string::npos) << text;
  const auto j = json::parse(slurp(out / "certificate.json"));
  EXPECT_FALSE(j["complete"].get<bool>());
  EXPECT_EQ(j["verdict"], "INCOMPLETE");
  EXPECT_EQ(j["kernels"][0]["verdict"], "INCOMPLETE") << j["kernels"][0]["headline"];
  const auto catalog = mla::golden::open_catalog(kGoldens, /*verify_files=*/false);
  EXPECT_LT(j["kernels"][0]["cases"].size(), mla::golden::read_file_info(catalog.file("attn_core.h5")).cases.size());
  EXPECT_EQ(slurp(out / "certificate.md").rfind("# MLA attention certificate: INCOMPLETE\n", 0), 0u);
  EXPECT_NE(slurp(out / "certificate.junit.xml").find("type=\"INCOMPLETE\""), std::string::npos);
}

}  // namespace
