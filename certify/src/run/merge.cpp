// `mla merge`: the certificates of the shards of one certification (`mla certify --shard I/N`
// on several machines) combined into the certificate of the whole selection. Shards are only
// combined when they certify the same thing: the same catalog, tool, options, tolerance table
// and implementation builds; anything else is refused naming the field and both values, because
// a merged PASS must mean what a single run's PASS means.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/case_kind.hpp"
#include "mla/certify/certify.hpp"
#include "mla/certify/junit.hpp"
#include "mla/golden/families.hpp"
#include "run/lock.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Part {
  fs::path dir;
  reports::Certificate cert;
};

std::string shown(const json& v) {
  const auto s = v.is_null() ? std::string("(absent)") : v.dump();
  return s.size() > 200 ? s.substr(0, 197) + "..." : s;
}

// Refuses two shards that differ in `field`.
void same(const std::string& field, const Part& a, const json& va, const Part& b, const json& vb) {
  if (va == vb) return;
  throw UsageError(fmt::format("cannot merge: {} differs: {} (shard {}) has {}, {} (shard {}) has {}", field,
                               a.dir.string(), a.cert.shard->index, shown(va), b.dir.string(), b.cert.shard->index,
                               shown(vb)));
}

json member(const json& j, const char* key) { return j.is_object() && j.contains(key) ? j.at(key) : json(); }

Part read_part(const fs::path& dir) {
  const auto file = dir / kJsonName;
  std::ifstream in(file);
  if (!in) throw UsageError(fmt::format("cannot merge: {} cannot be read", file.string()));
  Part p{dir, {}};
  try {
    p.cert = reports::certificate_from_json(json::parse(in));
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("cannot merge: {}: {}", file.string(), e.what()));
  }
  if (!p.cert.shard) {
    throw UsageError(fmt::format("cannot merge: {} is not a shard's certificate (it was not run with --shard I/N)",
                                 file.string()));
  }
  if (!p.cert.shard->part()) {
    throw UsageError(fmt::format("cannot merge: {} is already a merged certificate; merge the shards' own", file.string()));
  }
  const auto where = fmt::format("cannot merge: {}", file.string());
  check_consistent(p.cert, where);
  check_same_cases(p.cert, where);
  return p;
}

// Everything a result depends on must be the same in every shard. Machine-specific paths (the
// catalog folder, a plug-in's path) may differ; a plug-in is identified by its sha256.
void check_same(const Part& a, const Part& b) {
  same("shard count (N of --shard I/N)", a, a.cert.shard->count, b, b.cert.shard->count);
  same("tool_version", a, a.cert.tool_version, b, b.cert.tool_version);
  same("catalog.manifest_sha256 (the golden catalog)", a, a.cert.manifest_sha256, b, b.cert.manifest_sha256);
  same("build.tolerance_table_sha256 (the tolerance table)", a, member(a.cert.build, "tolerance_table_sha256"), b,
       member(b.cert.build, "tolerance_table_sha256"));
  std::set<std::string> keys;
  for (const auto* o : {&a.cert.options, &b.cert.options}) {
    if (o->is_object()) {
      for (const auto& [k, v] : o->items()) keys.insert(k);
    }
  }
  keys.erase("plugins");
  keys.erase("python_exe");  // a path of the machine; the kernel's origin identifies what ran
  for (const auto& k : keys) same("options." + k, a, member(a.cert.options, k.c_str()), b, member(b.cert.options, k.c_str()));
  const auto names = [](const reports::Certificate& c) {
    std::vector<std::string> n;
    for (const auto& k : c.kernels) n.push_back(k.name);
    return n;
  };
  same("kernels (the implementations certified)", a, names(a.cert), b, names(b.cert));
  for (std::size_t i = 0; i < a.cert.kernels.size(); ++i) {
    const auto& ka = a.cert.kernels[i];
    const auto& kb = b.cert.kernels[i];
    const auto where = fmt::format("kernels[{}] ({})", i, ka.name);
    same(where + ".version", a, ka.version, b, kb.version);
    same(where + ".origin.kind", a, member(ka.origin, "kind"), b, member(kb.origin, "kind"));
    same(where + ".origin.sha256 (the plug-in library)", a, member(ka.origin, "sha256"), b, member(kb.origin, "sha256"));
    same(where + ".origin.capabilities", a, member(ka.origin, "capabilities"), b, member(kb.origin, "capabilities"));
  }
}

// Rows in the order a single run writes them: the stored families of the case kinds every
// implementation has (in catalog order), then the fresh family, then the other kinds' stored
// families (certify.cpp); within a family by file and case (a single run writes the fresh cases
// in name order for this reason).
std::pair<int, std::size_t> family_rank(const std::string& certified_as) {
  const auto& fams = golden::families();
  if (certified_as == kFresh) return {1, 0};
  for (std::size_t i = 0; i < fams.size(); ++i) {
    if (fams[i].certified_as != certified_as) continue;
    const CaseKind* kind = case_kind_of(fams[i]);
    return {kind && kind->common() ? 0 : 2, i};
  }
  return {3, 0};
}

}  // namespace

reports::Certificate merge(const std::vector<fs::path>& shard_dirs, const fs::path& out, std::ostream& progress) {
  if (shard_dirs.empty()) throw UsageError("mla merge needs the report folders of the shards");
  std::vector<Part> parts;
  for (const auto& d : shard_dirs) {
    std::error_code ec;
    if (fs::equivalent(d, out, ec)) {
      throw UsageError(fmt::format("cannot merge into {}: it is the report folder of a shard; name another --out",
                                   out.string()));
    }
    parts.push_back(read_part(d));
  }
  std::sort(parts.begin(), parts.end(), [](const Part& x, const Part& y) { return x.cert.shard->index < y.cert.shard->index; });
  for (std::size_t i = 1; i < parts.size(); ++i) {
    check_same(parts[0], parts[i]);
    if (parts[i].cert.shard->index == parts[i - 1].cert.shard->index) {
      throw UsageError(fmt::format("cannot merge: shard {} of {} is given twice: {} and {}", parts[i].cert.shard->index,
                                   parts[i].cert.shard->count, parts[i - 1].dir.string(), parts[i].dir.string()));
    }
  }
  check_writable_folder(out);
  const ReportLock lock(out, progress);

  const int count = parts[0].cert.shard->count;
  reports::Certificate m = parts[0].cert;
  m.tool = "mla merge";
  m.notes.clear();
  m.complete = true;
  m.wall_seconds = 0;
  reports::ShardInfo info{0, count, {}, json::array()};
  std::set<int> present;
  // Which shard already holds a (kernel, case): a case in two shards means they were not cut
  // from one selection by one tool.
  std::map<std::string, std::size_t> owner;
  for (auto& k : m.kernels) k.cases.clear();
  for (std::size_t pi = 0; pi < parts.size(); ++pi) {
    const auto& p = parts[pi];
    const auto& c = p.cert;
    present.insert(c.shard->index);
    m.complete = m.complete && c.complete;
    m.started_utc = std::min(m.started_utc, c.started_utc);
    m.finished_utc = c.finished_utc.empty() || m.finished_utc.empty() ? std::string() : std::max(m.finished_utc, c.finished_utc);
    m.wall_seconds = std::max(m.wall_seconds, c.wall_seconds);  // the shards ran side by side
    for (const auto& n : c.notes) {
      if (std::find(m.notes.begin(), m.notes.end(), n) == m.notes.end()) m.notes.push_back(n);
    }
    info.merged.push_back({{"index", c.shard->index},
                           {"dir", fs::absolute(p.dir).lexically_normal().string()},
                           {"hostname", c.machine.hostname},
                           {"cpu_model", c.machine.cpu_model},
                           {"gpus", c.machine.gpus},
                           {"started_utc", c.started_utc},
                           {"finished_utc", c.finished_utc},
                           {"wall_seconds", c.wall_seconds},
                           {"complete", c.complete},
                           {"verdict", reports::verdict_text(c)}});
    for (std::size_t ki = 0; ki < c.kernels.size(); ++ki) {
      auto& mk = m.kernels[ki];
      const auto& k = c.kernels[ki];
      // Unavailable only where it was unavailable on every machine of the fleet.
      if (!k.unavailable) mk.unavailable.reset();
      for (const auto& r : k.cases) {
        const auto key = fmt::format("{}\n{}/{}/{}", k.name, r.family, r.file, r.name);
        const auto [at, fresh] = owner.emplace(key, pi);
        if (!fresh) {
          throw UsageError(fmt::format("cannot merge: {} case {}/{} is in shard {} ({}) and in shard {} ({})", k.name,
                                       r.family, r.name, parts[at->second].cert.shard->index,
                                       parts[at->second].dir.string(), c.shard->index, p.dir.string()));
        }
        mk.cases.push_back(r);
      }
    }
  }
  for (auto& k : m.kernels) {
    std::stable_sort(k.cases.begin(), k.cases.end(), [](const reports::CaseResult& x, const reports::CaseResult& y) {
      return std::tuple(family_rank(x.family), x.file, x.name) < std::tuple(family_rank(y.family), y.file, y.name);
    });
  }
  for (int i = 1; i <= count; ++i) {
    if (!present.count(i)) info.missing.push_back(i);
  }
  // Every shard is cut from one selection: whatever one implementation was run on, all were.
  check_same_cases(m, fmt::format("cannot merge {} shards", parts.size()));
  // A merge that lacks a shard is not a finished certification, in every field that says so.
  if (!info.missing.empty()) m.complete = false;
  if (!info.missing.empty()) {
    m.notes.push_back(fmt::format("merged without shard{} {} of {}: the cases of {} were never certified",
                                  info.missing.size() == 1 ? "" : "s", fmt::join(info.missing, ", "), count,
                                  info.missing.size() == 1 ? "that shard" : "those shards"));
  }
  std::vector<std::string> hosts;
  for (const auto& p : parts) {
    if (std::find(hosts.begin(), hosts.end(), p.cert.machine.hostname) == hosts.end()) hosts.push_back(p.cert.machine.hostname);
  }
  m.notes.push_back(fmt::format("merged from {} of {} shards (machines: {}); \"machine\" is shard {}'s, every shard's "
                                "is in shard.merged",
                                parts.size(), count, fmt::join(hosts, ", "), parts[0].cert.shard->index));
  m.shard = std::move(info);
  update_notes(m);
  write_outputs(m, out);
  return m;
}

}  // namespace mla::certify
