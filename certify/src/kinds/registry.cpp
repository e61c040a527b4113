// The registered case kinds (mla/certify/case_kind.hpp). A new kind is one folder of kinds/ and
// one line here.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kinds/kinds.hpp"
#include "mla/core/error.hpp"

namespace mla::certify {
namespace {

std::vector<std::string> kind_names(const std::vector<const CaseKind*>& kinds) {
  std::vector<std::string> n;
  for (const auto* k : kinds) n.emplace_back(k->name());
  return n;
}

const CaseKind* find_in(const std::vector<const CaseKind*>& kinds, std::string_view name) {
  for (const auto* k : kinds) {
    if (k->name() == name) return k;
  }
  return nullptr;
}

// The list itself, unchecked (check_catalog_kinds needs it before case_kinds() may return it).
const std::vector<const CaseKind*>& registered() {
  // Run order: the kinds every implementation has first (common()), then the others.
  static const std::vector<const CaseKind*> kinds{&decode_kind(), &append_kind(), &prefill_kind(), &merge_kind(),
                                                  &topk_kind(), &indexer_append_kind(), &indexer_logits_kind(),
                                                  &sparse_prefill_kind()};
  return kinds;
}

}  // namespace

void check_catalog_kinds(const std::vector<golden::Family>& families) {
  const auto& kinds = registered();
  for (const auto& f : families) {
    if (!f.certified()) continue;
    const CaseKind* k = find_in(kinds, f.certify);
    if (!k) {
      throw Error(fmt::format("the catalog description: family '{}': certify '{}' is no case kind of mla certify "
                              "(registered: {}, or {})",
                              f.name, f.certify, fmt::join(kind_names(kinds), ", "), golden::kNotCertified));
    }
    if (!k->loads()) {
      throw Error(fmt::format("the catalog description: family '{}': {} cases are all drawn at run time (family {}); "
                              "no stored family is certified as {}",
                              f.name, f.certify, golden::kFreshFamily, f.certify));
    }
    if (*k->loads() != f.kind) {
      throw Error(fmt::format("the catalog description: family '{}' is certified as {} cases, which are read from "
                              "{} families; it is a {} family",
                              f.name, f.certify, golden::to_string(*k->loads()), golden::to_string(f.kind)));
    }
  }
}

const std::vector<const CaseKind*>& case_kinds() {
  static const bool checked = [] {
    check_catalog_kinds(golden::families());
    check_catalog_kinds(golden::generated_families());
    return true;
  }();
  (void)checked;
  return registered();
}

const CaseKind* find_case_kind(std::string_view name) { return find_in(case_kinds(), name); }

const CaseKind* case_kind_of(const golden::Family& fam) {
  if (!fam.certified()) return nullptr;
  if (const CaseKind* k = find_case_kind(fam.certify)) return k;
  throw Error(fmt::format("family '{}': certify '{}' is no case kind of mla certify", fam.name, fam.certify));
}

const CaseKind* case_kind_of_rows(std::string_view certified_as) {
  for (const auto& f : golden::families()) {
    if (f.certified() && f.certified_as == certified_as) return case_kind_of(f);
  }
  return nullptr;
}

}  // namespace mla::certify
