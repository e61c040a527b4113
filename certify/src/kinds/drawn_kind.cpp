// The kinds whose every case is drawn at run time (drawn_kind.hpp).
#include "kinds/drawn_kind.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "mla/certify/fresh.hpp"
#include "mla/core/error.hpp"

namespace mla::certify {

void DrawnOnlyKind::plan(Session&, const golden::Family& fam, const std::vector<std::string>&,
                         std::vector<std::string>&) const {
  throw Error(fmt::format("family {}: {} cases are drawn at run time only", fam.name, name()));
}

bool DrawnOnlyKind::has_cases(const Session& s) const {
  if (!fresh_selected(s.options)) return false;
  for (const auto& k : s.implementations) {
    if (!serves(k)) continue;
    if (k.unavailable) return true;  // selected, with nothing to run: its record says why
    try {
      for (const auto& c : draw(k, fresh_seed(s.seed, k.info.name))) {
        if (!s.case_regex || std::regex_search(fresh_key(c.name), *s.case_regex)) return true;
      }
    } catch (const std::exception&) {
      return true;  // its ERROR row, which certify_fresh records
    }
  }
  return false;
}

std::string DrawnOnlyKind::why_none(const Session& s) const {
  if (!any_served(s, *this)) return {};
  if (!fresh_selected(s.options)) return fmt::format("{} cases are drawn at run time only: select family {}", name(), kFresh);
  return fmt::format("no drawn {} case matches --case", name());
}

std::function<bool(const reports::CaseResult&)> DrawnOnlyKind::reruns(const Session&) const {
  return [](const reports::CaseResult&) { return false; };  // no stored rows
}

void DrawnOnlyKind::certify_fresh(Session& s, const Implementation& k, uint64_t seed) const {
  if (!serves(k)) return;
  certify_drawn(s, k, name(), file(), [&] { return draw(k, seed); });
}

void certify_drawn(Session& s, const Implementation& k, std::string_view kind_name, const std::string& file,
                   const std::function<std::vector<DrawnCase>()>& draw) {
  using Clock = std::chrono::steady_clock;
  const std::string kind(kind_name);
  if (k.unavailable) return;  // the run draws nothing for it; its record says why
  std::vector<DrawnCase> cases;
  try {
    cases = draw();
  } catch (const std::exception& e) {
    auto r = drawn_row(s, file, kind, fmt::format("the drawn {} cases", kind));
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("fresh {} cases cannot be drawn: {}", kind, e.what()));
    if (s.in_shard(kFresh, r.name)) s.record(k, std::move(r));
    return;
  }
  // In name order, as every drawn row of a run (`mla merge` puts a shard's rows in that order).
  std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : cases) {
    if (stop_requested(s)) break;
    if (drawn_case(s, k, file, c.name) != Drawn::run) continue;
    const auto t0 = Clock::now();
    s.record(k, c.row(s, k));
    s.progress << fmt::format("[fresh] {} {:.2f}s: {}={}\n", c.name,
                              std::chrono::duration<double>(Clock::now() - t0).count(), k.info.name,
                              tol::to_string(s.report(k).cases.back().verdict));
  }
  s.save();
}

}  // namespace mla::certify
