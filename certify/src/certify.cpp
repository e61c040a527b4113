// The run: plan, resume, every attention case, the plug-in appends, the certificate rewritten
// after each. The seams live in plan.cpp, resume.cpp, attention_case.cpp and append_case.cpp.
#include "mla/certify/certify.hpp"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <ostream>
#include <random>

#include <fmt/format.h>

#include "mla/core/sha256.hpp"
#include "mla/core/tolerance.hpp"
#include "session.hpp"

#ifndef MLA_VERSION
#define MLA_VERSION "unknown"
#endif
#ifndef MLA_BUILD_TYPE
#define MLA_BUILD_TYPE "unknown"
#endif

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

json options_json(const Options& o) {
  std::vector<std::string> plugins;
  for (const auto& p : o.plugins) plugins.push_back(fs::absolute(p).lexically_normal().string());
  json j = {{"kernels", o.kernels},     {"plugins", plugins},         {"families", o.families},
            {"extras", o.extras},       {"repeats", o.repeats},      {"timeout_s", o.timeout_s},
            {"isolate", o.isolate},     {"probe_unclaimed", o.probe_unclaimed}};
  j["case_regex"] = o.case_regex ? json(*o.case_regex) : json();
  j["seed"] = o.seed ? json(*o.seed) : json();
  j["max_tokens"] = o.max_tokens ? json(*o.max_tokens) : json();
  return j;
}

// What the certificate says about the tool, the machine and the catalog before any case.
void begin(Session& s) {
  const Options& o = s.options;
  // Before anything else, so a run that could not record its results never starts.
  check_writable_folder(o.out);
  s.self = o.self_exe.empty() ? self_executable() : o.self_exe;
  if (s.self.empty()) throw UsageError("cannot find this executable (/proc/self/exe) to run kernels in a child");

  auto& cert = s.cert;
  cert.tool = "mla certify";
  cert.tool_version = MLA_VERSION;
  cert.started_utc = reports::utc_now_iso8601();
  cert.machine = reports::detect_machine(o.goldens);
  cert.build = {{"compiler", __VERSION__},
                {"build_type", MLA_BUILD_TYPE},
                {"tolerance_table_sha256", tolerance_table_digest()}};
  cert.goldens_dir = fs::absolute(o.goldens).lexically_normal().string();
  cert.options = options_json(o);
  // The seed actually used, also when it was drawn: `--seed` with it reproduces the run.
  cert.options["seed"] = s.seed;
  try {
    s.catalog = golden::open_catalog(o.goldens);
    cert.manifest_sha256 = sha256_file(o.goldens / "MANIFEST.sha256");
  } catch (const Error& e) {
    throw UsageError(fmt::format("the golden catalog in {} cannot be used: {}", o.goldens.string(), e.what()));
  }
  cert.manifest = s.catalog.sha256;
}

void progress_line(Session& s, std::size_t i, std::size_t n, const CaseRef& ref, double secs) {
  std::string verdicts;
  for (const auto& k : s.implementations) {
    const auto& cases = s.report(k).cases;
    if (cases.empty()) continue;
    verdicts += fmt::format(" {}={}", k.info.name, tol::to_string(cases.back().verdict));
  }
  s.progress << fmt::format("[{}/{}] {}/{} {:.2f}s:{}\n", i, n, ref.family, ref.name, secs, verdicts);
}

std::size_t total_results(const reports::Certificate& c) {
  std::size_t n = 0;
  for (const auto& k : c.kernels) n += k.cases.size();
  return n;
}

// A seed drawn at run time, unless --resume finds the one the previous certificate used (a
// resumed run continues that run).
uint64_t draw_seed(const Options& o) {
  if (o.resume) {
    try {
      std::ifstream in(o.out / kJsonName);
      const auto j = json::parse(in);
      if (j.at("options").at("seed").is_number_unsigned()) return j.at("options").at("seed").get<uint64_t>();
    } catch (const std::exception&) {
      // No usable previous certificate: resume says why; a fresh seed is drawn.
    }
  }
  std::random_device rd;
  return ((uint64_t{rd()} << 32) ^ rd()) & ((uint64_t{1} << 53) - 1);  // exact in any JSON reader
}

}  // namespace

void check_writable_folder(const std::filesystem::path& dir) {
  if (dir.empty()) throw UsageError("--out is required");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError(fmt::format("report folder {} cannot be created: {}", dir.string(), ec.message()));
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("report folder {} is not a folder", dir.string()));
  // Creating a file is the only reliable test (permissions, read-only mounts, quotas, root).
  const auto probe = dir / fmt::format(".mla-write-test.{}", ::getpid());
  {
    std::ofstream out(probe);
    out << "probe\n";
    out.flush();
    if (!out) {
      fs::remove(probe, ec);
      throw UsageError(fmt::format("report folder {} is not writable", dir.string()));
    }
  }
  fs::remove(probe, ec);
}

std::string tolerance_table_digest() {
  json all = json::array();
  for (const auto& t : tol::table()) all.push_back(tol::to_json(t));
  const auto text = all.dump();
  return sha256_hex({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

reports::Certificate run(const Options& options, std::ostream& progress) {
  if (options.out.empty()) throw UsageError("--out is required");
  if (options.repeats < 1) throw UsageError("--repeat must be at least 1");
  if (!(options.timeout_s > 0)) throw UsageError("--timeout must be positive");
  const auto t_start = Clock::now();
  Session s(options, progress);
  s.seed = options.seed ? *options.seed : draw_seed(options);
  {
    std::random_device rd;
    s.secret = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  begin(s);
  plan(s);
  if (options.resume) s.resume.load(options.out, s.cert, progress);
  progress << fmt::format("mla certify: {} implementations x {} cases from {}\n", s.implementations.size(),
                          s.attention_cases.size(), s.cert.goldens_dir);

  for (std::size_t i = 0; i < s.attention_cases.size(); ++i) {
    const auto t_case = Clock::now();
    certify_attention_case(s, s.attention_cases[i], i);
    update_notes(s.cert);
    s.cert.wall_seconds = seconds_since(t_start);
    s.save();
    progress_line(s, i + 1, s.attention_cases.size(), s.attention_cases[i], seconds_since(t_case));
  }
  if (fresh_selected(options)) {
    const auto t_fresh = Clock::now();
    certify_fresh(s);
    progress << fmt::format("fresh: cases drawn from seed {} in {:.1f} s\n", s.seed, seconds_since(t_fresh));
  }
  certify_appends(s);
  if (options.resume) {
    progress << fmt::format("resume: kept {} of {} results from the previous certificate\n", s.resume.kept,
                            total_results(s.cert));
  }
  s.cert.complete = true;
  s.cert.finished_utc = reports::utc_now_iso8601();
  s.cert.wall_seconds = seconds_since(t_start);
  s.save();
  if (s.save_failed) throw Error(fmt::format("the certificate could not be written to {}", options.out.string()));
  return std::move(s.cert);
}

}  // namespace mla::certify
