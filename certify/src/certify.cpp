// The run: plan, resume, every attention case, the plug-in appends, the certificate rewritten
// after each. The seams live in plan.cpp, resume.cpp, attention_case.cpp and append_case.cpp.
#include "mla/certify/certify.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <chrono>
#include <ctime>
#include <fstream>
#include <ostream>
#include <random>
#include <set>

#include <fmt/format.h>

#include "mla/core/sha256.hpp"
#include "mla/golden/families.hpp"
#include "mla/core/tolerance.hpp"
#include "lock.hpp"
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

// The signal that asked the run to stop (0: none). A stopped run keeps what it recorded and
// says INCOMPLETE; SA_RESETHAND makes a second signal end the process the default way.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop(int sig) { g_stop_signal = sig; }
// SIGXFSZ must not kill the certifier: past the file-size limit a write fails (EFBIG) and the
// case becomes a HOST_ERROR. A handler (not SIG_IGN) so that children, after exec, get the
// default action back and die of it, which host_cause() recognizes.
void on_file_size_limit(int) {}

class Signals {
 public:
  Signals() {
    g_stop_signal = 0;
    struct sigaction stop {};
    stop.sa_handler = on_stop;
    stop.sa_flags = SA_RESETHAND;
    sigemptyset(&stop.sa_mask);
    for (int i = 0; i < kStop; ++i) sigaction(kStopSignals[i], &stop, &old_[i]);
    struct sigaction fsz {};
    fsz.sa_handler = on_file_size_limit;
    sigemptyset(&fsz.sa_mask);
    sigaction(SIGXFSZ, &fsz, &old_fsz_);
  }
  ~Signals() {
    for (int i = 0; i < kStop; ++i) sigaction(kStopSignals[i], &old_[i], nullptr);
    sigaction(SIGXFSZ, &old_fsz_, nullptr);
  }
  Signals(const Signals&) = delete;
  Signals& operator=(const Signals&) = delete;

 private:
  static constexpr int kStop = 3;
  static constexpr int kStopSignals[kStop] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[kStop] {};
  struct sigaction old_fsz_ {};
};

// Stops the run between cases when a signal asked for it: says so and records why.
bool stop_requested(Session& s) {
  const int sig = g_stop_signal;
  if (sig == 0) return false;
  const auto note = fmt::format("stopped by {} before every selected case was run", signal_description(sig));
  if (std::find(s.cert.notes.begin(), s.cert.notes.end(), note) == s.cert.notes.end()) {
    s.cert.notes.push_back(note);
    s.progress << "mla certify: " << note << "; the certificate is INCOMPLETE (--resume finishes it)\n";
  }
  return true;
}

json options_json(const Options& o) {
  std::vector<std::string> plugins;
  for (const auto& p : o.plugins) plugins.push_back(fs::absolute(p).lexically_normal().string());
  json j = {{"kernels", o.kernels},     {"plugins", plugins},         {"families", o.families},
            {"extras", o.extras},       {"repeats", o.repeats},      {"timeout_s", o.timeout_s},
            {"isolate", o.isolate},     {"probe_unclaimed", o.probe_unclaimed},
            {"require_full_coverage", o.require_full_coverage}};
  j["pythons"] = o.pythons;
  j["python_exe"] = o.python_exe.empty() ? json() : json(o.python_exe.string());
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
  if (o.shard_count > 0) cert.shard = reports::ShardInfo{o.shard_index, o.shard_count, {}, {}};
  s.goldens.emplace(s.self);
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

// A certificate already in the report folder that this tool cannot read (damaged, or another
// tool's format) is kept under another name, never overwritten by this run's.
void set_aside_unreadable(const fs::path& out, std::ostream& progress) {
  const auto file = out / kJsonName;
  std::error_code ec;
  if (!fs::exists(file, ec)) return;
  std::string why;
  try {
    std::ifstream in(file);
    (void)reports::certificate_from_json(json::parse(in));
    return;
  } catch (const std::exception& e) {
    why = e.what();
  }
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  auto aside = out / fmt::format("{}.unreadable-{}", kJsonName, stamp);
  for (int i = 1; fs::exists(aside, ec); ++i) aside = out / fmt::format("{}.unreadable-{}-{}", kJsonName, stamp, i);
  fs::rename(file, aside, ec);
  if (ec) throw UsageError(fmt::format("{} is unreadable ({}) and cannot be moved aside: {}", file.string(), why, ec.message()));
  progress << fmt::format("mla certify: {} is unreadable ({}); kept as {}\n", file.string(), why, aside.filename().string());
}

// --resume with a narrower selection than the previous run's: the previous results of the
// cases it leaves out are kept (when they still hold), never deleted, and it says so.
void keep_outside_selection(Session& s) {
  std::set<std::string> selected;
  for (const auto& ref : s.attention_cases) selected.insert(ref.key());
  // The append family's rows are this run's when it certifies appends at all.
  std::set<std::string> rerun_families;
  if (any_append_case_selected(s)) {
    for (const auto& fam : golden::families()) {
      if (fam.certify == golden::Certified::append) rerun_families.insert(fam.certified_as);
    }
  }
  s.outside.assign(s.cert.kernels.size(), {});
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.cert.kernels.size(); ++i) {
    s.outside[i] = s.resume.outside(s.cert.kernels[i], s.catalog, [&](const reports::CaseResult& r) {
      // A drawn case is this run's when the fresh family, --case and the shard select it: then
      // certify_fresh keeps or redraws it; otherwise it is kept here like any catalog case.
      if (is_fresh_file(r.file)) {
        return fresh_selected(s.options) && s.in_shard("fresh", r.name) &&
               (!s.case_regex || std::regex_search("fresh/" + r.name, *s.case_regex));
      }
      return selected.count(r.file + "/" + r.name) > 0 || rerun_families.count(r.family) > 0;
    });
    n += s.outside[i].size();
  }
  if (n > 0) {
    s.progress << fmt::format("resume: keeping {} previous result{} of cases outside this selection\n", n,
                              n == 1 ? "" : "s");
  }
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
  if (options.shard_count > 0 && (options.shard_index < 1 || options.shard_index > options.shard_count)) {
    throw UsageError(fmt::format("--shard {}/{}: the index must be between 1 and {}", options.shard_index,
                                 options.shard_count, options.shard_count));
  }
  const auto t_start = Clock::now();
  Session s(options, progress);
  // Before anything is read or written there: one certifier per report folder.
  check_writable_folder(options.out);
  const ReportLock lock(options.out, progress);
  set_aside_unreadable(options.out, progress);
  s.seed = options.seed ? *options.seed : draw_seed(options);
  {
    std::random_device rd;
    s.secret = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  begin(s);
  plan(s);
  if (options.resume) {
    s.resume.load(options.out, s.cert, progress);
    keep_outside_selection(s);
  }
  progress << fmt::format("mla certify: {} implementations x {} cases from {}\n", s.implementations.size(),
                          s.attention_cases.size(), s.cert.goldens_dir);

  const Signals signals;
  bool stopped = false;
  for (std::size_t i = 0; i < s.attention_cases.size(); ++i) {
    if ((stopped = stop_requested(s))) break;
    const auto t_case = Clock::now();
    certify_attention_case(s, s.attention_cases[i], i);
    update_notes(s.cert);
    s.cert.wall_seconds = seconds_since(t_start);
    s.save();
    progress_line(s, i + 1, s.attention_cases.size(), s.attention_cases[i], seconds_since(t_case));
  }
  if (!stopped && fresh_selected(options)) {
    const auto t_fresh = Clock::now();
    certify_fresh(s);
    progress << fmt::format("fresh: cases drawn from seed {} in {:.1f} s\n", s.seed, seconds_since(t_fresh));
  }
  if (!stopped && any_append_case_selected(s)) stopped = stop_requested(s);
  if (!stopped) certify_appends(s);
  if (options.resume) {
    progress << fmt::format("resume: kept {} of {} results from the previous certificate\n", s.resume.kept,
                            total_results(s.cert));
  }
  s.cert.complete = !stopped;
  s.cert.finished_utc = reports::utc_now_iso8601();
  s.cert.wall_seconds = seconds_since(t_start);
  s.save();
  if (s.save_failed) throw Error(fmt::format("the certificate could not be written to {}", options.out.string()));
  return s.with_outside();
}

}  // namespace mla::certify
