// What `mla merge` and `mla certify --resume` check of a certificate they are given before they
// build on it: every row agrees with itself, every case of a shard is that shard's, and every
// implementation of a merged certificate holds the same catalog cases. A certificate is a file a
// user can edit; these checks catch an edit that makes it contradict itself, never one that
// keeps it self-consistent (certify/README.md, "What the tools trust").
#include <tuple>
#include <set>

#include <fmt/format.h>

#include "mla/certify/case_kind.hpp"
#include "mla/golden/families.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

std::string row_name(const reports::KernelReport& k, const reports::CaseResult& r) {
  return fmt::format("{} case {}/{} (file {})", k.name, r.family, r.name, r.file);
}

// Rows every implementation of a run holds: the stored cases of the kinds every implementation
// has (CaseKind::common; fresh cases are drawn inside each implementation's claims, appends
// exist for plug-ins with an append entry only, a stored case's twin for kernels from outside
// the suite only).
bool common_row(const reports::CaseResult& r) {
  if (is_fresh_file(r.file)) return false;
  if (r.name.ends_with(kTwinSuffix)) return false;
  const CaseKind* kind = case_kind_of_rows(r.family);
  return kind && kind->common();
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
  if (c.kernels.size() < 2) return;
  auto cases_of = [](const reports::KernelReport& k) {
    std::set<std::string> keys;
    for (const auto& r : k.cases) {
      if (common_row(r)) keys.insert(fmt::format("{}/{} (file {})", r.family, r.name, r.file));
    }
    return keys;
  };
  const auto first = cases_of(c.kernels.front());
  for (std::size_t i = 1; i < c.kernels.size(); ++i) {
    const auto other = cases_of(c.kernels[i]);
    if (other == first) continue;
    auto missing = [&](const std::string& lacks, const std::string& key, const std::string& has) {
      return UsageError(fmt::format("{}: the implementations cover different cases: {} has no row for case {} that {} "
                                    "has; refused",
                                    where, lacks, key, has));
    };
    const auto& a = c.kernels.front().name;
    const auto& b = c.kernels[i].name;
    for (const auto& key : first) {
      if (!other.count(key)) throw missing(b, key, a);
    }
    for (const auto& key : other) {
      if (!first.count(key)) throw missing(a, key, b);
    }
  }
}

}  // namespace mla::certify
