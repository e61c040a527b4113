// What `mla merge` and `mla certify --resume` check of a certificate they are given before they
// build on it: every row agrees with itself, every case of a shard is that shard's, and every
// implementation of a merged certificate holds the same catalog cases. A certificate is a file a
// user can edit; these checks catch an edit that makes it contradict itself, never one that
// keeps it self-consistent (certify/README.md, "What the tools trust").
#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "mla/certify/case_kind.hpp"
#include "mla/golden/families.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

std::string row_name(const reports::KernelReport& k, const reports::CaseResult& r) {
  return fmt::format("{} case {}/{} (file {})", k.name, r.family, r.name, r.file);
}

// The kind of a row that every implementation serving that kind holds: the stored cases of the
// kinds every implementation with their entry point is certified on (CaseKind::common; fresh
// cases are drawn inside each implementation's claims, appends exist for plug-ins with an append
// entry only, a stored case's twin for kernels from outside the suite only); nullptr otherwise.
const CaseKind* common_kind(const reports::CaseResult& r) {
  if (is_fresh_file(r.file)) return nullptr;
  if (r.name.ends_with(kTwinSuffix)) return nullptr;
  const CaseKind* kind = case_kind_of_rows(r.family);
  return kind && kind->common() ? kind : nullptr;
}

// Whether `k` is certified on `kind`. A certificate written before the kinds were recorded had
// only kernels with the decode entry: they serve the kinds every such kernel has (common) and
// those they hold rows of (append).
bool serves(const reports::KernelReport& k, const CaseKind& kind) {
  if (!k.kinds.empty()) return std::find(k.kinds.begin(), k.kinds.end(), kind.name()) != k.kinds.end();
  if (kind.common()) return true;
  return std::any_of(k.cases.begin(), k.cases.end(),
                     [&](const reports::CaseResult& r) { return case_kind_of_rows(r.family) == &kind; });
}

}  // namespace

void check_consistent(const reports::Certificate& c, const std::string& where) {
  for (const auto& k : c.kernels) {
    for (const auto& r : k.cases) {
      if (auto why = reports::row_contradiction(r)) {
        throw UsageError(fmt::format("{}: {} contradicts itself: {}; refused (a certificate edited by hand or damaged)",
                                     where, row_name(k, r), *why));
      }
      // A HOST_ERROR is never certified (and a failed fresh draw is every shard's): it is rerun,
      // whichever shard holds it.
      if (c.shard && c.shard->part() && r.verdict != tol::Verdict::host_error &&
          shard_of(r.family, r.name, c.shard->count) != c.shard->index) {
        throw UsageError(fmt::format("{}: {} belongs to shard {} of {}, not to this certificate's shard {}; refused",
                                     where, row_name(k, r), shard_of(r.family, r.name, c.shard->count),
                                     c.shard->count, c.shard->index));
      }
    }
  }
}

void check_same_cases(const reports::Certificate& c, const std::string& where) {
  auto cases_of = [](const reports::KernelReport& k, const CaseKind* kind) {
    std::set<std::string> keys;
    for (const auto& r : k.cases) {
      if (common_kind(r) == kind) keys.insert(fmt::format("{}/{} (file {})", r.family, r.name, r.file));
    }
    return keys;
  };
  // Kind by kind, among the implementations certified on it: a prefill kernel holds no decode row.
  for (const CaseKind* kind : case_kinds()) {
    if (!kind->common()) continue;
    const reports::KernelReport* first_kernel = nullptr;
    std::set<std::string> first;
    for (const auto& k : c.kernels) {
      if (!serves(k, *kind)) continue;
      const auto other = cases_of(k, kind);
      if (!first_kernel) {
        first_kernel = &k, first = other;
        continue;
      }
      if (other == first) continue;
      auto missing = [&](const std::string& lacks, const std::string& key, const std::string& has) {
        return UsageError(fmt::format("{}: the implementations cover different cases: {} has no row for case {} that "
                                      "{} has; refused",
                                      where, lacks, key, has));
      };
      for (const auto& key : first) {
        if (!other.count(key)) throw missing(k.name, key, first_kernel->name);
      }
      for (const auto& key : other) {
        if (!first.count(key)) throw missing(first_kernel->name, key, k.name);
      }
    }
  }
}

}  // namespace mla::certify
