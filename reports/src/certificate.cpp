// The certificate's JSON form (the record), its reader, and atomic file output.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/reports/certificate.hpp"
#include "mla/reports/coverage.hpp"

namespace mla::reports {
namespace {

using nlohmann::json;

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json();
}

json opt_cmp(const std::optional<tol::Comparison>& c) { return c ? tol::to_json(*c) : json(); }


// The readers below name the field that is missing or of the wrong type by its path in the
// certificate ("kernels[2].cases[5].verdict"), so a damaged certificate says where it is damaged.
std::string type_word(const json& v) {
  if (v.is_string()) return fmt::format("the string {}", v.dump().substr(0, 60));
  if (v.is_number()) return fmt::format("the number {}", v.dump().substr(0, 40));
  return v.type_name();
}

std::string join(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }

const json& at(const json& j, const std::string& where, const char* key) {
  if (!j.is_object()) throw Error(fmt::format("{}: expected an object, found {}", where.empty() ? "top level" : where, type_word(j)));
  if (!j.contains(key)) throw Error(fmt::format("{}: missing", join(where, key)));
  return j.at(key);
}

template <class T>
T get_as(const json& v, const std::string& where) {
  try {
    return v.get<T>();
  } catch (const json::exception&) {
    const char* want = std::is_same_v<T, std::string> ? "a string"
                       : std::is_same_v<T, bool>      ? "true or false"
                       : std::is_integral_v<T>        ? "an integer"
                       : std::is_floating_point_v<T>  ? "a number"
                                                      : "another type";
    if constexpr (!std::is_same_v<T, std::string> && !std::is_arithmetic_v<T>) want = "a list or map of strings";
    throw Error(fmt::format("{}: expected {}, found {}", where, want, type_word(v)));
  }
}

template <class T>
T field(const json& j, const std::string& where, const char* key) {
  return get_as<T>(at(j, where, key), join(where, key));
}

template <class T>
std::optional<T> read_opt(const json& j, const std::string& where, const char* key) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return get_as<T>(j.at(key), join(where, key));
}

std::optional<tol::Comparison> read_cmp(const json& j, const std::string& where, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  try {
    return tol::comparison_from_json(j.at(key));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", join(where, key), e.what()));
  }
}

json machine_json(const MachineInfo& m) {
  return {{"hostname", m.hostname}, {"cpu_model", m.cpu_model}, {"threads", m.threads},
          {"os", m.os},             {"gpus", m.gpus},           {"git_commit", opt(m.git_commit)},
          {"driver", opt(m.driver)}};
}

MachineInfo machine_from(const json& j, const std::string& w) {
  MachineInfo m;
  m.hostname = field<std::string>(j, w, "hostname");
  m.cpu_model = field<std::string>(j, w, "cpu_model");
  m.threads = field<int>(j, w, "threads");
  m.os = field<std::string>(j, w, "os");
  m.gpus = field<std::vector<std::string>>(j, w, "gpus");
  m.git_commit = read_opt<std::string>(j, w, "git_commit");
  m.driver = read_opt<std::string>(j, w, "driver");
  return m;
}

}  // namespace

const char* to_string(Cause c) {
  switch (c) {
    case Cause::none: return "none";
    case Cause::broken_claim: return "broken_claim";
    case Cause::over_max_tokens: return "over_max_tokens";
  }
  return "?";
}

Cause cause_from_string(const std::string& s) {
  for (const Cause c : {Cause::none, Cause::broken_claim, Cause::over_max_tokens}) {
    if (s == to_string(c)) return c;
  }
  throw Error(fmt::format("'{}' is not a cause (none, broken_claim, over_max_tokens)", s));
}

namespace {

json case_json(const CaseResult& r) {
  return {{"family", r.family},
          {"file", r.file},
          {"case", r.name},
          {"description", r.description},
          {"shape", r.shape},
          {"verdict", tol::to_string(r.verdict)},
          {"cause", to_string(r.cause)},
          {"probe", r.probe ? json(tol::to_string(*r.probe)) : json(nullptr)},
          {"reasons", r.reasons},
          {"out", opt_cmp(r.out)},
          {"lse", opt_cmp(r.lse)},
          {"latent", opt_cmp(r.latent)},
          {"k_pe", opt_cmp(r.k_pe)},
          {"max_logits", opt_cmp(r.max_logits)},
          {"out_vs_unquantized", opt_cmp(r.out_vs_unquantized)},
          {"lse_vs_unquantized", opt_cmp(r.lse_vs_unquantized)},
          {"run_seconds", opt(r.run_seconds)},
          {"bytes", opt(r.bytes)},
          {"flops", opt(r.flops)}};
}

// Format 1 had no NOT_CLAIMED: a case outside the claims was UNSUPPORTED, its reason opening
// with this.
constexpr std::string_view kFormat1NotClaimed = "not claimed: ";

CaseResult case_from(const json& j, const std::string& w, int format) {
  CaseResult r;
  r.family = field<std::string>(j, w, "family");
  r.file = field<std::string>(j, w, "file");
  r.name = field<std::string>(j, w, "case");
  r.description = field<std::string>(j, w, "description");
  r.shape = at(j, w, "shape");
  const auto word = field<std::string>(j, w, "verdict");
  try {
    r.verdict = tol::verdict_from_string(word);
  } catch (const Error& e) {
    throw Error(fmt::format("{}.verdict: {}", w, e.what()));
  }
  r.reasons = field<std::vector<std::string>>(j, w, "reasons");
  // Absent in certificates written before rows carried a cause.
  if (const auto cause = read_opt<std::string>(j, w, "cause")) {
    try {
      r.cause = cause_from_string(*cause);
    } catch (const Error& e) {
      throw Error(fmt::format("{}.cause: {}", w, e.what()));
    }
  }
  // Absent (or null) in certificates written before the informational run was recorded as such.
  if (const auto probe = read_opt<std::string>(j, w, "probe")) {
    try {
      r.probe = tol::verdict_from_string(*probe);
    } catch (const Error& e) {
      throw Error(fmt::format("{}.probe: {}", w, e.what()));
    }
  }
  if (format == 1 && r.verdict == tol::Verdict::unsupported && !r.reasons.empty() &&
      r.reasons.front().rfind(kFormat1NotClaimed, 0) == 0) {
    r.verdict = tol::Verdict::not_claimed;
    r.reasons.front().erase(0, kFormat1NotClaimed.size());
  }
  r.out = read_cmp(j, w, "out");
  r.lse = read_cmp(j, w, "lse");
  r.latent = read_cmp(j, w, "latent");
  r.k_pe = read_cmp(j, w, "k_pe");
  r.max_logits = read_cmp(j, w, "max_logits");  // absent before sparse prefill rows existed
  // Certificates written before append rows had fields of their own kept an append row's latent
  // and k_pe comparisons under "out" and "lse". Each comparison names what it compared, so such
  // a row is recognised by its "out" saying "latent", and read under the fields' own names.
  if (!j.contains("latent") && !j.contains("k_pe") && r.out && r.out->what == "latent") {
    r.latent = std::exchange(r.out, std::nullopt);
    r.k_pe = std::exchange(r.lse, std::nullopt);
  }
  r.out_vs_unquantized = read_cmp(j, w, "out_vs_unquantized");
  r.lse_vs_unquantized = read_cmp(j, w, "lse_vs_unquantized");
  r.run_seconds = read_opt<double>(j, w, "run_seconds");
  r.bytes = read_opt<double>(j, w, "bytes");
  r.flops = read_opt<double>(j, w, "flops");
  return r;
}

json counts_json(const Counts& c) {
  return {{"PASS", c.pass},         {"FAIL", c.fail},       {"UNSUPPORTED", c.unsupported},
          {"NOT_CLAIMED", c.not_claimed}, {"ERROR", c.error}, {"SKIPPED", c.skipped},
          {"HOST_ERROR", c.host_error}};
}

json coverage_json(const KernelReport& k) {
  const auto c = coverage(k);
  json table = json::array();
  for (const auto& row : c.table) {
    table.push_back({{"dimension", row.dimension}, {"catalog", row.catalog}, {"claimed", row.claimed}, {"passed", row.passed}});
  }
  return {{"cases", c.cases},           {"judged", c.judged},   {"passed", c.passed},
          {"not_claimed", c.not_claimed}, {"unsupported", c.unsupported}, {"skipped", c.skipped},
          {"size_filtered", c.size_filtered}, {"host_error", c.host_error}, {"full", c.full()},
          {"claims_exclude", c.claims_exclude}, {"table", table}};
}

// The table entries a certificate refers to, so it can be read without the source tree.
json tolerances_used(const Certificate& c) {
  std::map<std::string, json> used;
  auto note = [&](const tol::Comparison* cmp) {
    if (!cmp || used.count(cmp->tolerance)) return;
    try {
      used[cmp->tolerance] = tol::to_json(tol::lookup(cmp->tolerance));
    } catch (const Error&) {
      used[cmp->tolerance] = json();  // a name from another build's table: keep the reference
    }
  };
  for (const auto& k : c.kernels) {
    for (const auto& r : k.cases) {
      for (const auto* cmp : judged_comparisons(r)) note(cmp);
      for (const auto* cmp : {&r.out_vs_unquantized, &r.lse_vs_unquantized}) note(*cmp ? &**cmp : nullptr);
    }
  }
  json j = json::object();
  for (auto& [name, t] : used) j[name] = t;
  return j;
}

json shard_json(const std::optional<ShardInfo>& s) {
  if (!s) return json();
  json j = {{"count", s->count}};
  if (s->part()) {
    j["index"] = s->index;
  } else {
    j["missing"] = s->missing;
    j["merged"] = s->merged;
  }
  return j;
}

std::optional<ShardInfo> shard_from(const json& j) {
  if (!j.contains("shard") || j.at("shard").is_null()) return std::nullopt;
  const json& sj = j.at("shard");
  ShardInfo s;
  s.count = field<int>(sj, "shard", "count");
  s.index = read_opt<int>(sj, "shard", "index").value_or(0);
  s.missing = read_opt<std::vector<int>>(sj, "shard", "missing").value_or(std::vector<int>{});
  if (sj.contains("merged")) s.merged = sj.at("merged");
  if (s.count < 1 || s.index < 0 || s.index > s.count) {
    throw Error(fmt::format("shard: index {} of count {} is not a shard", s.index, s.count));
  }
  return s;
}

}  // namespace

std::vector<const tol::Comparison*> judged_comparisons(const CaseResult& r) {
  std::vector<const tol::Comparison*> v;
  for (const auto* c : {&r.out, &r.lse, &r.latent, &r.k_pe, &r.max_logits}) {
    if (*c) v.push_back(&**c);
  }
  return v;
}

Counts count(const KernelReport& k) {
  Counts c;
  for (const auto& r : k.cases) {
    switch (r.verdict) {
      case tol::Verdict::pass: ++c.pass; break;
      case tol::Verdict::fail: ++c.fail; break;
      case tol::Verdict::unsupported: ++c.unsupported; break;
      case tol::Verdict::error: ++c.error; break;
      case tol::Verdict::skipped: ++c.skipped; break;
      case tol::Verdict::not_claimed: ++c.not_claimed; break;
      case tol::Verdict::host_error: ++c.host_error; break;
    }
  }
  return c;
}

std::optional<std::string> row_contradiction(const CaseResult& r) {
  const auto stated = tol::to_string(r.verdict);
  if (r.cause == Cause::broken_claim && r.verdict != tol::Verdict::fail) {
    return fmt::format("its cause is broken_claim (a refusal of a claimed shape, a FAIL) but its verdict is {}", stated);
  }
  if (r.cause == Cause::over_max_tokens && r.verdict != tol::Verdict::skipped) {
    return fmt::format("its cause is over_max_tokens (left out by size, SKIPPED) but its verdict is {}", stated);
  }
  if (r.probe && r.verdict != tol::Verdict::not_claimed) {
    return fmt::format("it records an informational run (probe {}), which only a NOT_CLAIMED row has, but its verdict is {}",
                       tol::to_string(*r.probe), stated);
  }
  if (r.verdict != tol::Verdict::pass) {
    if (r.reasons.empty()) return fmt::format("its verdict is {} but it gives no reason why it is not PASS", stated);
    return std::nullopt;
  }
  if (!r.reasons.empty()) {
    return fmt::format("its verdict is PASS but it gives {} reason{} it is not (first: {})", r.reasons.size(),
                       r.reasons.size() == 1 ? "" : "s", r.reasons.front());
  }
  for (const auto* c : judged_comparisons(r)) {
    if (c->verdict != tol::Verdict::pass) {
      return fmt::format("its verdict is PASS but its own {} comparison says {}", c->what, tol::to_string(c->verdict));
    }
  }
  return std::nullopt;
}

bool is_red(const Certificate& c) {
  for (const auto& k : c.kernels) {
    const auto n = count(k);
    if (n.fail > 0 || n.error > 0) return true;
  }
  return false;
}

// Whether `k` came from outside the suite (a C plug-in or a Python kernel the user named): it was
// brought to be certified, so a run that judged none of its cases certified nothing about it.
static bool external(const KernelReport& k) {
  if (!k.origin.is_object() || !k.origin.contains("kind") || !k.origin.at("kind").is_string()) return false;
  const auto kind = k.origin.at("kind").get<std::string>();
  return kind == "plugin" || kind == "python";
}

Overall overall(const Certificate& c) {
  if (!c.complete) return Overall::incomplete;
  if (c.shard && !c.shard->missing.empty()) return Overall::incomplete;
  int judged = 0;
  bool external_unjudged = false;
  for (const auto& k : c.kernels) {
    const auto n = count(k);
    if (n.host_error > 0) return Overall::incomplete;
    judged += n.pass + n.fail + n.error;
    if (external(k) && !k.unavailable && n.pass + n.fail + n.error == 0 && n.total() > 0) external_unjudged = true;
  }
  if (is_red(c)) return Overall::fail;
  // A certificate in which nothing was judged (or in which a kernel brought to be certified had
  // nothing judged) says nothing passed: never PASS. A shard may hold no judged case at all (the
  // split is by hash): its merge is judged as a whole.
  if (c.shard && c.shard->part()) return Overall::pass;
  if (judged == 0 || external_unjudged) return Overall::not_judged;
  return Overall::pass;
}

std::string not_judged_reason(const Certificate& c) {
  std::vector<std::string> who, cannot;
  for (const auto& k : c.kernels) {
    const auto n = count(k);
    if (n.pass + n.fail + n.error > 0) continue;
    if (k.unavailable) cannot.push_back(fmt::format("{} cannot run here ({})", k.name, *k.unavailable));
    else if (n.total() > 0) who.push_back(k.name);
  }
  if (who.empty()) {
    return cannot.empty() ? "no case of the selection was judged"
                          : fmt::format("no case was judged: {}", fmt::join(cannot, "; "));
  }
  return fmt::format("no case of {} was judged (each one not claimed, refused, skipped or over --max-tokens): nothing "
                     "was certified about {}",
                     fmt::join(who, ", "), who.size() == 1 ? "it" : "them");
}

const char* to_string(Overall o) {
  switch (o) {
    case Overall::pass: return "PASS";
    case Overall::fail: return "FAIL";
    case Overall::incomplete: return "INCOMPLETE";
    case Overall::not_judged: return "NOT_JUDGED";
  }
  return "?";
}

std::string verdict_text(const Certificate& c) {
  const std::string word = to_string(overall(c));
  if (c.shard && c.shard->part()) return fmt::format("{} (shard {} of {})", word, c.shard->index, c.shard->count);
  return word;
}

// A merge that lacks a shard is as unfinished as a run that was stopped.
static bool finished(const Certificate& c) { return c.complete && !(c.shard && !c.shard->missing.empty()); }

std::string headline(const Certificate& c, const KernelReport& k) {
  auto h = headline(k, finished(c));
  if (c.shard && c.shard->part()) h += fmt::format(" [shard {} of {} only]", c.shard->index, c.shard->count);
  if (c.shard && !c.shard->missing.empty()) {
    h += fmt::format(" [shard {} of {} missing]", fmt::join(c.shard->missing, ", "), c.shard->count);
  }
  return h;
}

int exit_status(const Certificate& c, bool require_full_coverage) {
  switch (overall(c)) {
    case Overall::incomplete: return kExitIncomplete;
    case Overall::fail: return kExitFail;
    case Overall::not_judged: return kExitCoverage;
    case Overall::pass: break;
  }
  if (require_full_coverage) {
    for (const auto& k : c.kernels) {
      if (!coverage(k).full()) return kExitCoverage;
    }
  }
  return kExitPass;
}

json to_json(const Certificate& c) {
  json kernels = json::array();
  for (const auto& k : c.kernels) {
    json cases = json::array();
    for (const auto& r : k.cases) cases.push_back(case_json(r));
    kernels.push_back({{"name", k.name},
                       {"backend", k.backend},
                       {"description", k.description},
                       {"out_dtype", k.out_dtype},
                       {"version", k.version},
                       {"origin", k.origin},
                       {"declared", k.declared},
                       {"kinds", k.kinds},
                       {"notes", k.notes},
                       {"unavailable", opt(k.unavailable)},
                       {"verdict", kernel_verdict(k, finished(c))},
                       {"headline", headline(c, k)},
                       {"counts", counts_json(count(k))},
                       {"coverage", coverage_json(k)},
                       {"cases", std::move(cases)}});
  }
  return {{"format", kCertificateFormat},
          {"tool", c.tool},
          {"tool_version", c.tool_version},
          {"started_utc", c.started_utc},
          {"finished_utc", c.finished_utc},
          {"complete", c.complete},
          {"verdict", verdict_text(c)},
          {"red", is_red(c)},
          {"wall_seconds", c.wall_seconds},
          {"machine", machine_json(c.machine)},
          {"build", c.build},
          {"options", c.options},
          {"catalog", {{"dir", c.goldens_dir}, {"manifest", c.manifest}, {"manifest_sha256", c.manifest_sha256}}},
          {"notes", c.notes},
          {"shard", shard_json(c.shard)},
          {"tolerances", tolerances_used(c)},
          {"kernels", std::move(kernels)}};
}

Certificate certificate_from_json(const json& j) {
  const std::string w;
  try {
    const int format = field<int>(j, w, "format");
    if (format < kMinCertificateFormat || format > kCertificateFormat) {
      throw Error(fmt::format("format: {} is not one this tool reads ({} to {})", format, kMinCertificateFormat,
                              kCertificateFormat));
    }
    Certificate c;
    c.tool = field<std::string>(j, w, "tool");
    c.tool_version = field<std::string>(j, w, "tool_version");
    c.started_utc = field<std::string>(j, w, "started_utc");
    c.finished_utc = field<std::string>(j, w, "finished_utc");
    c.complete = field<bool>(j, w, "complete");
    c.wall_seconds = field<double>(j, w, "wall_seconds");
    c.machine = machine_from(at(j, w, "machine"), "machine");
    c.build = at(j, w, "build");
    c.options = at(j, w, "options");
    const json& cat = at(j, w, "catalog");
    c.goldens_dir = field<std::string>(cat, "catalog", "dir");
    c.manifest = field<std::map<std::string, std::string>>(cat, "catalog", "manifest");
    c.manifest_sha256 = read_opt<std::string>(cat, "catalog", "manifest_sha256").value_or("");
    c.notes = field<std::vector<std::string>>(j, w, "notes");
    c.shard = shard_from(j);
    const json& kernels = at(j, w, "kernels");
    if (!kernels.is_array()) throw Error(fmt::format("kernels: expected a list, found {}", type_word(kernels)));
    for (std::size_t ki = 0; ki < kernels.size(); ++ki) {
      const json& kj = kernels[ki];
      const std::string kw = fmt::format("kernels[{}]", ki);
      KernelReport k;
      k.name = field<std::string>(kj, kw, "name");
      k.backend = field<std::string>(kj, kw, "backend");
      k.description = field<std::string>(kj, kw, "description");
      k.out_dtype = field<std::string>(kj, kw, "out_dtype");
      // Fields added after format 1 was first written: absent in older certificates.
      k.version = read_opt<std::string>(kj, kw, "version").value_or("");
      if (kj.contains("origin")) k.origin = kj.at("origin");
      if (kj.contains("declared")) k.declared = kj.at("declared");
      k.kinds = read_opt<std::vector<std::string>>(kj, kw, "kinds").value_or(std::vector<std::string>{});
      // What --resume compares a plug-in by: it must be what the certifier wrote there.
      if (k.origin.is_object() && k.origin.contains("sha256")) (void)field<std::string>(k.origin, kw + ".origin", "sha256");
      k.notes = read_opt<std::vector<std::string>>(kj, kw, "notes").value_or(std::vector<std::string>{});
      k.unavailable = read_opt<std::string>(kj, kw, "unavailable");
      const json& cases = at(kj, kw, "cases");
      if (!cases.is_array()) throw Error(fmt::format("{}.cases: expected a list, found {}", kw, type_word(cases)));
      for (std::size_t ci = 0; ci < cases.size(); ++ci) {
        k.cases.push_back(case_from(cases[ci], fmt::format("{}.cases[{}]", kw, ci), format));
      }
      c.kernels.push_back(std::move(k));
    }
    return c;
  } catch (const json::exception& e) {
    // Whatever the readers above did not anticipate, still said as a certificate problem.
    throw Error(fmt::format("certificate JSON is malformed: {}", e.what()));
  }
}

namespace {

// `text` in a temporary file next to `path` (the same file system, so a rename replaces `path`
// in one step); its name. POSIX calls rather than a stream: a failed write must say why (a full
// disk, a file-size limit). Nothing is left behind on failure.
std::filesystem::path write_temporary(const std::filesystem::path& path, std::string_view text) {
  const auto tmp = path.parent_path() / fmt::format(".{}.tmp.{}", path.filename().string(), ::getpid());
  auto failed = [&](const char* doing, int err) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw WriteError(fmt::format("{} {} failed: {}", doing, tmp.string(), std::strerror(err)), err);
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) failed("creating", errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      failed("writing", err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) failed("closing", errno);
  return tmp;
}

void rename_into_place(const std::filesystem::path& tmp, const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw WriteError(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()), ec.value());
  }
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  rename_into_place(write_temporary(path, text), path);
}

void write_files_together(const std::vector<std::pair<std::filesystem::path, std::string>>& files) {
  std::vector<std::filesystem::path> temps;
  try {
    for (const auto& [path, text] : files) temps.push_back(write_temporary(path, text));
  } catch (...) {
    std::error_code ec;
    for (const auto& t : temps) std::filesystem::remove(t, ec);
    throw;
  }
  // Every byte is written; only renames are left, with no signal handled between them. The
  // first file is renamed last, as the commit point: a SIGKILL between two renames (no mask stops
  // it) leaves it as it was, so whoever reads it (the certificate's JSON) never sees it ahead of
  // the others.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  std::optional<WriteError> failure;
  for (std::size_t i = temps.size(); i-- > 0;) {
    try {
      if (!failure) rename_into_place(temps[i], files[i].first);
    } catch (const WriteError& e) {
      failure = e;
    }
    std::error_code ec;
    if (failure) std::filesystem::remove(temps[i], ec);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (failure) throw *failure;
}

void write_certificate(const Certificate& c, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create report folder {}: {}", dir.string(), ec.message()));
  write_file_atomically(dir / "certificate.json", to_json(c).dump(1) + "\n");
  write_file_atomically(dir / "certificate.md", to_markdown(c));
}

std::string utc_now_iso8601() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace mla::reports
