// The certificate's JSON form (the record), its reader, and atomic file output.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::reports {
namespace {

using nlohmann::json;

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json();
}

json opt_cmp(const std::optional<tol::Comparison>& c) { return c ? tol::to_json(*c) : json(); }

std::optional<tol::Comparison> read_cmp(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return tol::comparison_from_json(j.at(key));
}

template <class T>
std::optional<T> read_opt(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<T>();
}

json machine_json(const MachineInfo& m) {
  return {{"hostname", m.hostname}, {"cpu_model", m.cpu_model}, {"threads", m.threads},
          {"os", m.os},             {"gpus", m.gpus},           {"git_commit", opt(m.git_commit)},
          {"driver", opt(m.driver)}};
}

MachineInfo machine_from(const json& j) {
  MachineInfo m;
  m.hostname = j.at("hostname").get<std::string>();
  m.cpu_model = j.at("cpu_model").get<std::string>();
  m.threads = j.at("threads").get<int>();
  m.os = j.at("os").get<std::string>();
  m.gpus = j.at("gpus").get<std::vector<std::string>>();
  m.git_commit = read_opt<std::string>(j, "git_commit");
  m.driver = read_opt<std::string>(j, "driver");
  return m;
}

json case_json(const CaseResult& r) {
  return {{"family", r.family},
          {"file", r.file},
          {"case", r.name},
          {"description", r.description},
          {"shape", r.shape},
          {"verdict", tol::to_string(r.verdict)},
          {"reasons", r.reasons},
          {"out", opt_cmp(r.out)},
          {"lse", opt_cmp(r.lse)},
          {"out_vs_unquantized", opt_cmp(r.out_vs_unquantized)},
          {"lse_vs_unquantized", opt_cmp(r.lse_vs_unquantized)},
          {"run_seconds", opt(r.run_seconds)},
          {"bytes", opt(r.bytes)},
          {"flops", opt(r.flops)}};
}

CaseResult case_from(const json& j) {
  CaseResult r;
  r.family = j.at("family").get<std::string>();
  r.file = j.at("file").get<std::string>();
  r.name = j.at("case").get<std::string>();
  r.description = j.at("description").get<std::string>();
  r.shape = j.at("shape");
  r.verdict = tol::verdict_from_string(j.at("verdict").get<std::string>());
  r.reasons = j.at("reasons").get<std::vector<std::string>>();
  r.out = read_cmp(j, "out");
  r.lse = read_cmp(j, "lse");
  r.out_vs_unquantized = read_cmp(j, "out_vs_unquantized");
  r.lse_vs_unquantized = read_cmp(j, "lse_vs_unquantized");
  r.run_seconds = read_opt<double>(j, "run_seconds");
  r.bytes = read_opt<double>(j, "bytes");
  r.flops = read_opt<double>(j, "flops");
  return r;
}

json counts_json(const Counts& c) {
  return {{"PASS", c.pass}, {"FAIL", c.fail}, {"UNSUPPORTED", c.unsupported},
          {"ERROR", c.error}, {"SKIPPED", c.skipped}};
}

// The table entries a certificate refers to, so it can be read without the source tree.
json tolerances_used(const Certificate& c) {
  std::map<std::string, json> used;
  auto note = [&](const std::optional<tol::Comparison>& cmp) {
    if (!cmp || used.count(cmp->tolerance)) return;
    try {
      used[cmp->tolerance] = tol::to_json(tol::lookup(cmp->tolerance));
    } catch (const Error&) {
      used[cmp->tolerance] = json();  // a name from another build's table: keep the reference
    }
  };
  for (const auto& k : c.kernels) {
    for (const auto& r : k.cases) {
      note(r.out), note(r.lse), note(r.out_vs_unquantized), note(r.lse_vs_unquantized);
    }
  }
  json j = json::object();
  for (auto& [name, t] : used) j[name] = t;
  return j;
}

}  // namespace

Counts count(const KernelReport& k) {
  Counts c;
  for (const auto& r : k.cases) {
    switch (r.verdict) {
      case tol::Verdict::pass: ++c.pass; break;
      case tol::Verdict::fail: ++c.fail; break;
      case tol::Verdict::unsupported: ++c.unsupported; break;
      case tol::Verdict::error: ++c.error; break;
      case tol::Verdict::skipped: ++c.skipped; break;
    }
  }
  return c;
}

bool is_red(const Certificate& c) {
  for (const auto& k : c.kernels) {
    const auto n = count(k);
    if (n.fail > 0 || n.error > 0) return true;
  }
  return false;
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
                       {"notes", k.notes},
                       {"unavailable", opt(k.unavailable)},
                       {"counts", counts_json(count(k))},
                       {"cases", std::move(cases)}});
  }
  return {{"format", kCertificateFormat},
          {"tool", c.tool},
          {"tool_version", c.tool_version},
          {"started_utc", c.started_utc},
          {"finished_utc", c.finished_utc},
          {"complete", c.complete},
          {"verdict", is_red(c) ? "FAIL" : "PASS"},
          {"wall_seconds", c.wall_seconds},
          {"machine", machine_json(c.machine)},
          {"build", c.build},
          {"options", c.options},
          {"catalog", {{"dir", c.goldens_dir}, {"manifest", c.manifest}, {"manifest_sha256", c.manifest_sha256}}},
          {"notes", c.notes},
          {"tolerances", tolerances_used(c)},
          {"kernels", std::move(kernels)}};
}

Certificate certificate_from_json(const json& j) {
  try {
    if (j.at("format").get<int>() != kCertificateFormat) {
      throw Error(fmt::format("certificate format {} is not the supported {}", j.at("format").dump(),
                              kCertificateFormat));
    }
    Certificate c;
    c.tool = j.at("tool").get<std::string>();
    c.tool_version = j.at("tool_version").get<std::string>();
    c.started_utc = j.at("started_utc").get<std::string>();
    c.finished_utc = j.at("finished_utc").get<std::string>();
    c.complete = j.at("complete").get<bool>();
    c.wall_seconds = j.at("wall_seconds").get<double>();
    c.machine = machine_from(j.at("machine"));
    c.build = j.at("build");
    c.options = j.at("options");
    c.goldens_dir = j.at("catalog").at("dir").get<std::string>();
    c.manifest = j.at("catalog").at("manifest").get<std::map<std::string, std::string>>();
    c.manifest_sha256 = read_opt<std::string>(j.at("catalog"), "manifest_sha256").value_or("");
    c.notes = j.at("notes").get<std::vector<std::string>>();
    for (const auto& kj : j.at("kernels")) {
      KernelReport k;
      k.name = kj.at("name").get<std::string>();
      k.backend = kj.at("backend").get<std::string>();
      k.description = kj.at("description").get<std::string>();
      k.out_dtype = kj.at("out_dtype").get<std::string>();
      // Fields added after format 1 was first written: absent in older certificates.
      k.version = read_opt<std::string>(kj, "version").value_or("");
      if (kj.contains("origin")) k.origin = kj.at("origin");
      if (kj.contains("declared")) k.declared = kj.at("declared");
      k.notes = read_opt<std::vector<std::string>>(kj, "notes").value_or(std::vector<std::string>{});
      k.unavailable = read_opt<std::string>(kj, "unavailable");
      for (const auto& cj : kj.at("cases")) k.cases.push_back(case_from(cj));
      c.kernels.push_back(std::move(k));
    }
    return c;
  } catch (const json::exception& e) {
    throw Error(fmt::format("certificate JSON is malformed: {}", e.what()));
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  // The temporary lives next to the target so the rename stays within one file system.
  const auto tmp = path.parent_path() / fmt::format(".{}.tmp.{}", path.filename().string(), ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("cannot write {}", tmp.string()));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error(fmt::format("writing {} failed (disk full?)", tmp.string()));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
  }
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
