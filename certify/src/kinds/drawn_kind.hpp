// Private to mla_certify: what the kinds whose every case is drawn at run time share (top-k,
// the indexer cache append): no stored family (loads() is empty, so the catalog cannot name
// one), cases only when the fresh family is selected, and the loop over one implementation's
// drawn cases. Their kernels are registered ones of that kind only and run in this process
// (stored_kind.hpp's call_in_process).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kinds/stored_kind.hpp"

namespace mla::certify {

// One drawn case of such a kind, whatever its inputs: its name, and its row for an
// implementation (run and judged when asked).
struct DrawnCase {
  std::string name;
  std::function<reports::CaseResult(Session&, const Implementation&)> row;
};

class DrawnOnlyKind : public CaseKind {
 public:
  std::optional<golden::FamilyKind> loads() const override { return std::nullopt; }
  bool common() const override { return false; }
  // No family is certified as one of these kinds (check_catalog_kinds refuses one), so none is
  // planned.
  void plan(Session&, const golden::Family& fam, const std::vector<std::string>&,
            std::vector<std::string>&) const override;
  // Some selected implementation of the kind has a drawn case that --case selects (or is
  // unavailable: selected, its record says why it has no row): the cases are drawn here to know.
  bool has_cases(const Session& s) const override;
  std::string why_none(const Session& s) const override;
  void cut_to_shard(Session&) const override {}  // drawn cases are cut as they are drawn (drawn_case)
  std::function<bool(const reports::CaseResult&)> reruns(const Session&) const override;
  bool certify_stored(Session&) const override { return true; }
  // certify_drawn over draw(k, seed).
  void certify_fresh(Session& s, const Implementation& k, uint64_t seed) const override;

 protected:
  // The file of its drawn rows (its one drawn_files() entry).
  virtual std::string file() const = 0;
  // The cases drawn for `k` (which serves this kind) from `seed`, inside its claims.
  virtual std::vector<DrawnCase> draw(const Implementation& k, uint64_t seed) const = 0;
};

// One implementation's drawn cases of a kind (rows of `file`, family fresh), in name order: each
// outside this run's selection, kept by --resume, or run; progress per case, saved at the end.
// Cases that cannot be drawn (`draw` throws) are one ERROR row. For the drawn-only kinds and for
// a kind with stored cases as well (the indexer logits).
void certify_drawn(Session& s, const Implementation& k, std::string_view kind, const std::string& file,
                   const std::function<std::vector<DrawnCase>()>& draw);

// Drawn cases of type `Case` (each with a `name`), each run by `row`.
template <class Case>
std::vector<DrawnCase> as_drawn(std::vector<Case> cases,
                                reports::CaseResult (*row)(Session&, const Implementation&, const Case&)) {
  std::vector<DrawnCase> out;
  for (auto& c : cases) {
    auto shared = std::make_shared<const Case>(std::move(c));
    out.push_back({shared->name, [shared, row](Session& s, const Implementation& k) { return row(s, k, *shared); }});
  }
  return out;
}

// The start of a row of a drawn case: its family, file, name and description.
inline reports::CaseResult drawn_row(const Session& s, const std::string& file, const std::string& name,
                                     const std::string& description) {
  auto r = s.base_result({kFresh, file, name});
  r.description = description;
  return r;
}

}  // namespace mla::certify
