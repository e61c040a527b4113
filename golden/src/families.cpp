#include "mla/golden/families.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "mla/core/error.hpp"

namespace mla::golden {

// fixtures/catalog.json as text, embedded by golden/CMakeLists.txt (families_json.cpp.in).
extern const char* const kCatalogJson;

namespace {

constexpr FamilyKind kKinds[] = {FamilyKind::attention, FamilyKind::layer, FamilyKind::prefill, FamilyKind::merge,
                                 FamilyKind::indexer};

bool valid_name(const std::string& n) {
  return !n.empty() && n.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
}

}  // namespace

const char* to_string(FamilyKind kind) {
  switch (kind) {
    case FamilyKind::attention: return "attention";
    case FamilyKind::layer: return "layer";
    case FamilyKind::prefill: return "prefill";
    case FamilyKind::merge: return "merge";
    case FamilyKind::indexer: return "indexer";
  }
  return "unknown";
}

std::vector<Family> parse_families(std::string_view text) {
  using nlohmann::json;
  std::vector<Family> out;
  std::string at = "the catalog description";
  try {
    const json j = json::parse(text);
    if (j.at("format") != "mla-golden-catalog" || j.at("version") != 1) {
      throw Error("the catalog description is not format mla-golden-catalog, version 1");
    }
    std::set<std::string> names;
    for (const auto& f : j.at("families")) {
      Family fam;
      fam.name = f.at("name").get<std::string>();
      at = fmt::format("family '{}'", fam.name);
      if (!valid_name(fam.name)) throw Error(fmt::format("{}: the name is not [a-z0-9_]+", at));
      if (!names.insert(fam.name).second) throw Error(fmt::format("{} is described twice", at));
      fam.generated = f.value("generated", false);
      // A generated family's cases come from the run's seed; a seed here would say otherwise.
      if (fam.generated && f.contains("seed")) {
        throw Error(fmt::format("{}: a generated family has no seed of its own", at));
      }
      if (!fam.generated) fam.seed = f.at("seed").get<uint64_t>();
      const std::string kind = f.at("kind").get<std::string>();
      const auto known = std::find_if(std::begin(kKinds), std::end(kKinds),
                                      [&](FamilyKind k) { return kind == to_string(k); });
      if (known == std::end(kKinds)) {
        throw Error(fmt::format("{}: kind '{}' is none of attention, layer, prefill, merge", at, kind));
      }
      fam.kind = *known;
      fam.case_kind = f.at("case_kind").get<std::string>();
      if (!valid_name(fam.case_kind)) throw Error(fmt::format("{}: case_kind is not [a-z0-9_]+", at));
      // Which case kinds exist, and which family kind each needs, is the certifier's to know
      // (its kind registry checks every family against them); here only the word's form.
      fam.certify = f.at("certify").get<std::string>();
      if (!valid_name(fam.certify)) throw Error(fmt::format("{}: certify is not [a-z0-9_]+", at));
      fam.certified_as = f.value("certified_as", fam.name);
      if (!valid_name(fam.certified_as)) throw Error(fmt::format("{}: certified_as is not [a-z0-9_]+", at));
      fam.about = f.at("about").get<std::string>();
      out.push_back(std::move(fam));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{} is malformed: {}", at, e.what()));
  }
  if (out.empty()) throw Error("the catalog description lists no family");
  // A certificate row's family names one family only.
  std::set<std::string> rows;
  for (const auto& f : out) {
    if (f.certified() && !rows.insert(f.certified_as).second) {
      throw Error(fmt::format("two families are certified as '{}'", f.certified_as));
    }
  }
  return out;
}

namespace {

// The catalog's families, stored (first) and generated (second).
const std::pair<std::vector<Family>, std::vector<Family>>& catalog() {
  static const auto split = [] {
    std::pair<std::vector<Family>, std::vector<Family>> s;
    for (auto& f : parse_families(kCatalogJson)) (f.generated ? s.second : s.first).push_back(std::move(f));
    return s;
  }();
  return split;
}

}  // namespace

const std::vector<Family>& families() { return catalog().first; }

const std::vector<Family>& generated_families() { return catalog().second; }

const Family& fresh_family() {
  for (const auto& f : generated_families()) {
    if (f.name == kFreshFamily) return f;
  }
  if (find_family(kFreshFamily)) {
    throw Error(fmt::format("the catalog description declares family '{}' as stored; mla certify draws it at run "
                            "time (\"generated\": true)",
                            kFreshFamily));
  }
  throw Error(fmt::format("the catalog description lacks family '{}', the cases mla certify draws at run time",
                          kFreshFamily));
}

const Family* find_family(std::string_view name) {
  for (const auto& f : families()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const Family& family(std::string_view name) {
  if (const Family* f = find_family(name)) return *f;
  throw Error(fmt::format("unknown golden family '{}' (known: {})", name, fmt::join(family_names(), ", ")));
}

std::vector<std::string> family_names(FamilyKind kind) {
  std::vector<std::string> n;
  for (const auto& f : families()) {
    if (f.kind == kind) n.push_back(f.name);
  }
  return n;
}

std::vector<std::string> family_names_certified_by(std::string_view case_kind) {
  std::vector<std::string> n;
  for (const auto& f : families()) {
    if (f.certify == case_kind) n.push_back(f.name);
  }
  return n;
}

std::vector<std::string> family_names() {
  std::vector<std::string> n;
  for (const auto& f : families()) n.push_back(f.name);
  return n;
}

}  // namespace mla::golden
