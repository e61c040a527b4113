// The run: plan, resume, every registered case kind's cases (mla/certify/case_kind.hpp), the
// certificate rewritten after each. The seams live in plan.cpp, resume.cpp and kinds/.
#include "mla/certify/certify.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <ostream>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/case_kind.hpp"
#include "mla/certify/fresh.hpp"
#include "mla/certify/host_error.hpp"
#include "mla/core/sha256.hpp"
#include "mla/golden/families.hpp"
#include "mla/core/tolerance.hpp"
#include "run/lock.hpp"
#include "run/session.hpp"

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


json options_json(const Options& o) {
  std::vector<std::string> plugins;
  for (const auto& p : o.plugins) plugins.push_back(fs::absolute(p).lexically_normal().string());
  // The fault kernels keep the key "extras": published certificates spell it so, and --resume
  // compares these options with theirs.
  json j = {{"kernels", o.kernels},     {"plugins", plugins},         {"families", o.families},
            {"extras", o.faults},       {"repeats", o.repeats},      {"timeout_s", o.timeout_s},
            {"isolate", o.isolate},     {"probe_unclaimed", o.probe_unclaimed},
            {"probe_python", o.probe_python},
            {"require_full_coverage", o.require_full_coverage}};
  j["pythons"] = o.pythons;
  j["python_exe"] = o.python_exe.empty() ? json() : json(o.python_exe.string());
  j["case_regex"] = o.case_regex ? json(*o.case_regex) : json();
  j["seed"] = o.seed ? json(*o.seed) : json();
  j["max_tokens"] = o.max_tokens ? json(*o.max_tokens) : json();
  j["long_cases"] = o.long_cases;
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

std::size_t total_results(const reports::Certificate& c) {
  std::size_t n = 0;
  for (const auto& k : c.kernels) n += k.cases.size();
  return n;
}

// A seed drawn at run time, unless --resume finds the one the previous certificate used (a
// resumed run continues that run).
uint64_t draw_seed(const Options& o, const std::optional<reports::Certificate>& previous) {
  if (o.resume && previous && previous->options.is_object() && previous->options.contains("seed") &&
      previous->options.at("seed").is_number_unsigned()) {
    return previous->options.at("seed").get<uint64_t>();
  }
  // No usable previous certificate: resume says why; a fresh seed is drawn.
  std::random_device rd;
  return ((uint64_t{rd()} << 32) ^ rd()) & ((uint64_t{1} << 53) - 1);  // exact in any JSON reader
}

// The certificate already in the report folder, when this tool can read it. One it cannot read
// (damaged, or another tool's format) is kept under another name, never overwritten by this
// run's.
std::optional<reports::Certificate> read_or_set_aside(const fs::path& out, std::ostream& progress) {
  const auto file = out / kJsonName;
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  std::string why;
  try {
    std::ifstream in(file);
    return reports::certificate_from_json(json::parse(in));
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
  return std::nullopt;
}

// --resume with a narrower selection than the previous run's: the previous results of the
// cases it leaves out are kept (when they still hold), never deleted, and it says so. Which rows
// are this run's is each case kind's to say (CaseKind::reruns).
void keep_outside_selection(Session& s) {
  std::map<std::string, std::function<bool(const reports::CaseResult&)>> reruns;  // by row family
  for (const auto& fam : golden::families()) {
    if (const CaseKind* kind = case_kind_of(fam)) reruns.emplace(fam.certified_as, kind->reruns(s));
  }
  s.outside.assign(s.cert.kernels.size(), {});
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.cert.kernels.size(); ++i) {
    s.outside[i] = s.resume.outside(s.cert.kernels[i], s.catalog, [&](const reports::CaseResult& r) {
      // A drawn case is this run's when the fresh family, --case and the shard select it: then
      // certify_fresh keeps or redraws it; otherwise it is kept here like any catalog case.
      if (is_fresh_file(r.file)) {
        return fresh_selected(s.options) && s.in_shard(kFresh, r.name) &&
               (!s.case_regex || std::regex_search(fresh_key(r.name), *s.case_regex));
      }
      const auto rerun = reruns.find(r.family);
      return rerun != reruns.end() && rerun->second(r);
    });
    n += s.outside[i].size();
  }
  if (n > 0) {
    s.progress << fmt::format("resume: keeping {} previous result{} of cases outside this selection\n", n,
                              n == 1 ? "" : "s");
  }
}

// The stored cases of the kinds every implementation has (CaseKind::common) or of the others;
// false when a stop was asked for.
bool certify_stored(Session& s, bool common) {
  for (const CaseKind* kind : case_kinds()) {
    if (kind->common() != common) continue;
    if (stop_requested(s) || !kind->certify_stored(s)) return false;
  }
  return !stop_requested(s);
}

// The certificate's files in `out` with their bytes, as they are now.
std::vector<std::pair<fs::path, std::string>> read_outputs(const fs::path& out) {
  std::vector<std::pair<fs::path, std::string>> files;
  for (const char* name : {kJsonName, kMarkdownName, kJunitName}) {
    std::ifstream in(out / name, std::ios::binary);
    if (!in) continue;
    files.emplace_back(out / name, std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  return files;
}

// Moves the certificate's files found in `out` aside (as *.superseded); what it moved.
std::vector<std::string> move_aside(const fs::path& out) {
  std::vector<std::string> moved;
  for (const char* name : {kJsonName, kMarkdownName, kJunitName}) {
    std::error_code ec;
    if (!fs::exists(out / name, ec)) continue;
    fs::rename(out / name, out / (std::string(name) + ".superseded"), ec);
    moved.push_back(ec ? fmt::format("{} (could not be moved: {})", name, ec.message()) : std::string(name));
  }
  return moved;
}

// The first write of a run to its folder, before any slow step (catalog hashing, golden
// read-through, plug-in description, planning): the certificate already there is rewritten
// (all three files) as superseded, INCOMPLETE and naming this run, so that a run stopped or
// killed at any later point never leaves an older verdict readable as the current one. Its
// rows stay: --resume still keeps what holds of them. When even that cannot be written (a full
// disk), the old files are moved aside rather than left to speak for this run.
std::optional<reports::Certificate> supersede(const fs::path& out, std::optional<reports::Certificate> previous,
                                              const std::string& started, std::ostream& progress) {
  if (!previous) {
    // No readable JSON (none, or one set aside as unreadable): a Markdown or JUnit file of an
    // older run must not go on speaking for the folder either.
    for (const auto& name : move_aside(out)) {
      progress << fmt::format("mla certify: {} of an earlier run kept as {}.superseded\n", name, name);
    }
    return previous;
  }
  previous->complete = false;
  previous->finished_utc.clear();
  previous->notes.push_back(fmt::format("superseded: mla certify (pid {}, started {}) is certifying into this folder; "
                                        "until it writes its own certificate, this one is not current",
                                        ::getpid(), started));
  try {
    write_outputs(*previous, out);
  } catch (const std::exception& e) {
    const auto moved = move_aside(out);
    throw HostFailure(fmt::format("the previous certificate in {} could not be marked as superseded ({}); nothing was "
                                  "run; moved aside as *.superseded: {}",
                                  out.string(), e.what(), moved.empty() ? "nothing" : fmt::format("{}", fmt::join(moved, ", "))));
  }
  return previous;
}

// The descriptors the certifier holds at once (a golden file, its scratch files, the shared
// buffers, a child's log and /dev/null): too few of them (ulimit -n) is the machine's limit,
// said up front as such rather than blamed later on the catalog, a plug-in or a kernel.
void check_descriptors() {
  constexpr int kNeeded = 8;
  std::vector<int> fds;
  int err = 0;
  while (static_cast<int>(fds.size()) < kNeeded) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      err = errno;
      break;
    }
    fds.push_back(fd);
  }
  for (const int fd : fds) ::close(fd);
  if (err != 0) {
    struct rlimit lim {};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    throw HostFailure(fmt::format("the certifier cannot hold {} more files open ({}; ulimit -n is {}): raise the "
                                  "limit, then --resume",
                                  kNeeded, std::strerror(err), static_cast<unsigned long long>(lim.rlim_cur)));
  }
}

// A stop before the first case: the folder keeps the superseded certificate (its note now
// says this run stopped) or, when there was none, this run's empty one; either reads INCOMPLETE.
reports::Certificate stopped_before_any_case(Session& s, Clock::time_point t_start) {
  (void)stop_requested(s);
  const auto why = fmt::format("stopped by {} before its first case", signal_description(stop_signal()));
  reports::Certificate c;
  if (s.superseded) {
    c = *s.superseded;
    c.notes.back() = fmt::format("superseded: mla certify (pid {}, started {}) was {}; this certificate is not "
                                 "current (--resume finishes the run, keeping what still holds)",
                                 ::getpid(), s.cert.started_utc, why);
  } else {
    c = s.cert;
    c.complete = false;
    c.wall_seconds = seconds_since(t_start);
  }
  s.progress << fmt::format("mla certify: {}; the certificate is INCOMPLETE\n", why);
  try {
    write_outputs(c, s.options.out);
  } catch (const std::exception& e) {
    throw HostFailure(fmt::format("{}, and the certificate could not be written: {}", why, e.what()));
  }
  return c;
}

}  // namespace

void certify_fresh(Session& s) {
  // Implementation by implementation, every kind's drawn cases for it, from the same seed.
  for (auto& k : s.implementations) {
    if (stop_requested(s)) return;
    if (k.unavailable) continue;
    const uint64_t seed = fresh_seed(s.seed, k.info.name);
    for (const CaseKind* kind : case_kinds()) {
      if (!kind->serves(k)) continue;
      if (stop_requested(s)) return;
      kind->certify_fresh(s, k, seed);
    }
  }
}

void check_writable_folder(const std::filesystem::path& dir) {
  if (dir.empty()) throw UsageError("--out is required");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UsageError(fmt::format("report folder {} cannot be created: {}", dir.string(), ec.message()));
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("report folder {} is not a folder", dir.string()));
  // Creating a file is the only reliable test (permissions, read-only mounts, quotas, root).
  // A full disk or quota is the machine's state, not a wrong option: said as such (HostFailure).
  const auto probe = dir / fmt::format(".mla-write-test.{}", ::getpid());
  try {
    reports::write_file_atomically(probe, "probe\n");
  } catch (const reports::WriteError& e) {
    fs::remove(probe, ec);
    if (is_host_errno(e.err())) throw HostFailure(fmt::format("report folder {} is full: {}", dir.string(), e.what()));
    throw UsageError(fmt::format("report folder {} is not writable: {}", dir.string(), e.what()));
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
  // First: a stop asked for from here on is honoured by every phase.
  const StopHandlers signals;
  if (options.out.empty()) throw UsageError("--out is required");
  if (options.repeats < 1) throw UsageError("--repeat must be at least 1");
  if (!(options.timeout_s > 0)) throw UsageError("--timeout must be positive");
  if (options.shard_count > 0 && (options.shard_index < 1 || options.shard_index > options.shard_count)) {
    throw UsageError(fmt::format("--shard {}/{}: the index must be between 1 and {}", options.shard_index,
                                 options.shard_count, options.shard_count));
  }
  // A malformed simulated context cost is the run's usage error, not an ERROR in every child.
  std::optional<double> simulated;
  try {
    simulated = simulated_context_seconds();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (simulated) {
    progress << fmt::format("mla certify: {}={}: every process that runs a kernel waits that long once, as it "
                            "would to create its CUDA context\n",
                            kSimulatedContextEnv, *simulated);
  }
  const auto t_start = Clock::now();
  const auto started = reports::utc_now_iso8601();
  // Before anything is read or written there: one certifier per report folder.
  try {
    check_writable_folder(options.out);
  } catch (const HostFailure& e) {
    // Full: nothing can be written there, but the certificate there must not go on speaking
    // for this run (a rename needs no free space).
    const ReportLock lock(options.out, progress);
    const auto moved = move_aside(options.out);
    throw HostFailure(fmt::format("{}; nothing was run; moved aside as *.superseded: {}", e.what(),
                                  moved.empty() ? "nothing" : fmt::format("{}", fmt::join(moved, ", "))));
  }
  const ReportLock lock(options.out, progress);
  auto previous = read_or_set_aside(options.out, progress);
  // A certificate --resume would build on is refused, untouched, when it contradicts itself.
  if (options.resume && previous) check_consistent(*previous, (options.out / kJsonName).string());
  const uint64_t seed = options.seed ? *options.seed : draw_seed(options, previous);
  // The files as they are, put back should this run turn out to be a usage error before it ran
  // anything (an unknown kernel, an empty selection): a typo must not cost the folder its verdict.
  const auto before = previous ? read_outputs(options.out) : std::vector<std::pair<fs::path, std::string>>{};
  // The folder's first write, before the scratch folder (a full TMPDIR) or anything slow.
  auto superseded = supersede(options.out, std::move(previous), started, progress);
  check_descriptors();
  // The session's scratch folder is in TMPDIR: full (or out of descriptors) is the machine's
  // failure, missing or not a folder is a setting to fix, both said as such.
  std::optional<Session> session;
  try {
    session.emplace(options, progress);
  } catch (const std::exception& e) {
    const auto why = fmt::format("no scratch folder can be created in the temporary folder (TMPDIR): {}", e.what());
    if (host_cause(e)) throw HostFailure(why);
    throw UsageError(why);
  }
  Session& s = *session;
  s.started = t_start;
  s.cert.tool = "mla certify";
  s.cert.started_utc = started;
  s.seed = seed;
  s.superseded = std::move(superseded);
  {
    std::random_device rd;
    s.secret = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  try {
    stop_point(s);
    begin(s);
    plan(s);
    stop_point(s);
    if (options.resume) {
      s.resume.load(options.out, s.cert, progress);
      keep_outside_selection(s);
    }
  } catch (const Stopped&) {
    return stopped_before_any_case(s, t_start);
  } catch (const UsageError&) {
    try {
      if (!before.empty()) reports::write_files_together(before);
    } catch (const std::exception& e) {
      progress << fmt::format("mla certify: the previous certificate stays marked as superseded: {}\n", e.what());
    }
    throw;
  }
  // The kinds every implementation has, the cases drawn at run time, then the kinds only some
  // implementations have: the order of the certificate's rows (merge.cpp sorts shards' so too).
  bool stopped = !certify_stored(s, true);
  if (!stopped && fresh_selected(options)) {
    const auto t_fresh = Clock::now();
    certify_fresh(s);
    progress << fmt::format("{}: cases drawn from seed {} in {:.1f} s\n", kFresh, s.seed, seconds_since(t_fresh));
  }
  // Each phase stops within its step in progress; whichever saw the signal, the run is stopped.
  if (!stopped) stopped = !certify_stored(s, false);
  if (options.resume) {
    progress << fmt::format("resume: kept {} of {} results from the previous certificate\n", s.resume.kept,
                            total_results(s.cert));
  }
  s.cert.complete = !stopped;
  s.cert.finished_utc = reports::utc_now_iso8601();
  s.cert.wall_seconds = seconds_since(t_start);
  s.save();
  if (s.save_failed) {
    throw HostFailure(fmt::format("the certificate could not be written to {} ({}); nothing certified is lost but "
                                  "the file on disk is behind: free the space or raise the limit, then --resume",
                                  options.out.string(), s.save_error));
  }
  return s.with_outside();
}

}  // namespace mla::certify
