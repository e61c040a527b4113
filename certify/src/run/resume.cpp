// --resume: which results of a previous certificate still hold. A result is kept only when the
// tool version, the tolerance table and every option a result depends on are the same, the
// implementation is the same (version, and a plug-in's library bytes), and so is the golden file,
// or for a case drawn at run time (family fresh) the seed it was drawn from: the same tool, seed
// and implementation draw the same case, so such a row holds exactly as a catalog row does.
#include <fstream>

#include <fmt/format.h>

#include "mla/certify/case_kind.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

using nlohmann::json;

// What --resume compares: the version, and for a plug-in also the library's bytes; for a Python
// kernel the digest of its spec, executable, Python and torch versions and module source.
std::string identity(const reports::KernelReport& k) {
  std::string id = k.version;
  if (k.origin.is_object() && k.origin.contains("sha256")) id += "#" + k.origin.at("sha256").get<std::string>();
  return id;
}

// The options a result depends on (a kept result must be what a rerun would give).
json result_options(const json& options) {
  json j = json::object();
  for (const char* key : {"repeats", "max_tokens", "timeout_s", "probe_unclaimed", "probe_python", "isolate"}) {
    j[key] = options.contains(key) ? options.at(key) : json();
  }
  return j;
}

// What a fresh row's result depends on besides the implementation and the options: the seed its
// case was drawn from ("" when the certificate records none; then nothing fresh is kept).
std::string fresh_origin(const json& options) {
  if (!options.is_object() || !options.contains("seed") || !options.at("seed").is_number_unsigned()) return {};
  return fmt::format("drawn from seed {}", options.at("seed").get<uint64_t>());
}

}  // namespace

bool is_fresh_file(const std::string& file) {
  for (const CaseKind* kind : case_kinds()) {
    for (const auto& f : kind->drawn_files()) {
      if (f == file) return true;
    }
  }
  return false;
}

void Resume::load(const std::filesystem::path& out, const reports::Certificate& now, std::ostream& progress) {
  const auto file = out / kJsonName;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    progress << fmt::format("resume: no previous certificate in {}; running everything\n", out.string());
    return;
  }
  reports::Certificate old;
  try {
    std::ifstream in(file);
    old = reports::certificate_from_json(json::parse(in));
  } catch (const std::exception& e) {
    progress << fmt::format("resume: {} is unreadable ({}); running everything\n", file.string(), e.what());
    return;
  }
  auto mismatch = [&]() -> std::optional<std::string> {
    if (old.tool_version != now.tool_version) return fmt::format("tool version {} vs {}", old.tool_version, now.tool_version);
    const json old_tol = old.build.is_object() && old.build.contains("tolerance_table_sha256")
                             ? old.build.at("tolerance_table_sha256") : json();
    if (old_tol != now.build.at("tolerance_table_sha256")) return std::string("the tolerance table changed");
    // Another shard's rows are not this shard's to keep (nor a whole run's, nor a merge's).
    const auto shard_word = [](const reports::Certificate& c) {
      return c.shard ? fmt::format("{}/{}", c.shard->index, c.shard->count) : std::string("none");
    };
    if (shard_word(old) != shard_word(now)) return fmt::format("shard {} vs {}", shard_word(old), shard_word(now));
    if (result_options(old.options) != result_options(now.options)) {
      return fmt::format("options {} vs {}", result_options(old.options).dump(), result_options(now.options).dump());
    }
    return std::nullopt;
  }();
  if (mismatch) {
    progress << fmt::format("resume: the previous certificate is not comparable ({}); running everything\n", *mismatch);
    return;
  }
  now_fresh_ = fresh_origin(now.options);
  const std::string old_fresh = fresh_origin(old.options);
  for (const auto& k : old.kernels) {
    auto& slot = kernels_[k.name];
    slot.identity = identity(k);
    for (const auto& r : k.cases) {
      std::string origin;
      if (is_fresh_file(r.file)) {
        origin = old_fresh;
      } else if (const auto digest = old.manifest.find(r.file); digest != old.manifest.end()) {
        origin = digest->second;
      }
      if (origin.empty()) continue;
      const std::string key = r.file + "/" + r.name;
      if (!slot.cases.count(key)) slot.order.push_back(key);
      slot.cases[key] = {origin, r};
    }
  }
}

std::optional<reports::CaseResult> Resume::previous(const reports::KernelReport& k, const CaseRef& ref,
                                                    const golden::Catalog& catalog) const {
  const auto p = kernels_.find(k.name);
  if (p == kernels_.end() || p->second.identity != identity(k)) return std::nullopt;
  const auto c = p->second.cases.find(ref.key());
  if (c == p->second.cases.end()) return std::nullopt;
  if (is_fresh_file(ref.file)) {
    if (now_fresh_.empty() || now_fresh_ != c->second.first) return std::nullopt;
  } else {
    const auto now = catalog.sha256.find(ref.file);
    if (now == catalog.sha256.end() || now->second != c->second.first) return std::nullopt;
  }
  // The machine failed that case, not the implementation: it was never certified, so it runs.
  if (c->second.second.verdict == tol::Verdict::host_error) return std::nullopt;
  return c->second.second;
}

}  // namespace mla::certify
