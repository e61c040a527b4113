// The stored cases of the prefill and merge kinds, planned, sharded, resumed and certified one by
// one (stored_kind.hpp).
#include "kinds/stored_kind.hpp"

#include <algorithm>
#include <set>

#include "mla/certify/twin.hpp"
#include "mla/golden/golden.hpp"
#include "run/claims.hpp"

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;

const std::vector<CaseRef>& cases_of(const Session& s, const CaseKind& kind) {
  static const std::vector<CaseRef> none;
  const auto it = s.kind_cases.find(std::string(kind.name()));
  return it == s.kind_cases.end() ? none : it->second;
}

}  // namespace

bool any_served(const Session& s, const CaseKind& kind) {
  return std::any_of(s.implementations.begin(), s.implementations.end(),
                     [&](const Implementation& k) { return kind.serves(k); });
}

void StoredCasesKind::plan(Session& s, const golden::Family& fam, const std::vector<std::string>& files,
                           std::vector<std::string>& unused) const {
  // Its entry says a family of this kind was selected (why_none), with or without cases.
  auto& cases = s.kind_cases[std::string(name())];
  if (!any_served(s, *this)) {
    for (const auto& f : files) {
      unused.push_back(fmt::format("{} (family {}: certified for {} implementations; none is selected)", f, fam.name,
                                   name()));
    }
    return;
  }
  if (files.empty()) {
    const auto note = fmt::format("family {} is not in the catalog (no file of MANIFEST.sha256 says family {})",
                                  fam.certified_as, fam.name);
    if (!s.options.families.empty()) throw UsageError(note);
    s.cert.notes.push_back(note);
    s.progress << "warning: " << note << "\n";
    return;
  }
  for (const auto& file : files) {
    for (const auto& c : golden::read_file_info(s.catalog.file(file)).cases) {
      if (s.case_regex && !std::regex_search(fam.certified_as + "/" + c, *s.case_regex)) continue;
      cases.push_back({fam.certified_as, file, c});
    }
  }
}

bool StoredCasesKind::has_cases(const Session& s) const { return any_served(s, *this) && !cases_of(s, *this).empty(); }

std::string StoredCasesKind::why_none(const Session& s) const {
  if (!s.kind_cases.count(std::string(name()))) return {};  // none of its families is selected
  if (!any_served(s, *this)) return fmt::format("no selected implementation has the {} entry point", name());
  return fmt::format("no {} case", name());
}

void StoredCasesKind::cut_to_shard(Session& s) const {
  const auto it = s.kind_cases.find(std::string(name()));
  if (it == s.kind_cases.end()) return;
  const auto before = it->second.size();
  std::erase_if(it->second, [&](const CaseRef& r) { return !s.in_shard(r.family, r.name); });
  s.progress << fmt::format("mla certify: shard {} of {}: {} of {} {} cases\n", s.options.shard_index,
                            s.options.shard_count, it->second.size(), before, name());
}

CaseRef twin_ref(const CaseRef& ref) { return {ref.family, ref.file, ref.name + kTwinSuffix}; }

uint64_t twin_seed(const Session& s, std::string_view kind, const CaseRef& ref) {
  return hash_text(hash_text(s.seed ^ 0x7317ull, fmt::format("{} twin", kind)), ref.key());
}

std::function<bool(const reports::CaseResult&)> StoredCasesKind::reruns(const Session& s) const {
  std::set<std::string> selected;
  for (const auto& ref : cases_of(s, *this)) selected.insert(ref.key()), selected.insert(twin_ref(ref).key());
  return [selected = std::move(selected)](const reports::CaseResult& r) {
    return selected.count(r.file + "/" + r.name) > 0;
  };
}

bool StoredCasesKind::certify_stored(Session& s) const {
  const auto& cases = cases_of(s, *this);
  if (cases.empty() || !any_served(s, *this)) return true;
  std::vector<const Implementation*> served;
  for (const auto& k : s.implementations) {
    if (serves(k)) served.push_back(&k);
  }
  const bool external = std::any_of(served.begin(), served.end(), [](const auto* k) { return k->external; });
  s.progress << fmt::format("mla certify: {} {} implementations x {} cases, {}\n", served.size(), name(), cases.size(),
                            external ? "registered ones in this process, external ones in child processes"
                                     : "in this process");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (stop_requested(s)) return false;
    const auto t0 = Clock::now();
    const auto& ref = cases[i];
    std::vector<const Implementation*> pending;
    for (const auto* k : served) {
      // A case and its twin are decided together: both kept, or both run again.
      const bool twin = twins() && k->external;
      auto kept = s.kept(*k, ref);
      auto kept_twin = kept && twin ? s.kept(*k, twin_ref(ref)) : std::nullopt;
      if (kept && (!twin || kept_twin)) {
        s.record(*k, std::move(*kept));
        if (kept_twin) s.record(*k, std::move(*kept_twin));
      } else {
        if (kept) --s.resume.kept;  // counted by kept(), then run again with its twin after all
        pending.push_back(k);
      }
    }
    if (!pending.empty()) {
      // Checked again right before it is read, as every stored case is: a golden file changed
      // since the start of the run is never believed.
      std::optional<std::string> changed;
      try {
        golden::verify_file(s.catalog, ref.file);
      } catch (const std::exception& e) {
        changed = e.what();
      }
      if (!changed) certify_case(s, ref, pending);
      for (const auto* k : changed ? pending : std::vector<const Implementation*>{}) {
        record_error(s, *k, ref, fmt::format("golden file {} failed re-verification before loading: {}", ref.file, *changed));
      }
    }
    update_notes(s.cert);
    s.cert.wall_seconds = seconds_since(s.started);
    s.save();
    std::string verdicts;
    for (const auto* k : served) {
      verdicts += fmt::format(" {}={}", k->info.name, tol::to_string(s.report(*k).cases.back().verdict));
    }
    s.progress << fmt::format("[{}/{}] {}/{} {:.2f}s:{}\n", i + 1, cases.size(), ref.family, ref.name,
                              seconds_since(t0), verdicts);
  }
  return true;
}

void StoredCasesKind::record_error(Session& s, const Implementation& k, const CaseRef& ref, const std::string& why) const {
  for (const auto& row : twins() && k.external ? std::vector{ref, twin_ref(ref)} : std::vector{ref}) {
    auto r = s.base_result(row);
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(why);
    s.record(k, std::move(r));
  }
}

bool entry_claimed(Session& s, reports::CaseResult& r, const Implementation& k,
                   const std::function<ClaimQuestion()>& question) {
  if (!k.external || !k.can_implement) return true;
  try {
    const auto c = claim_entry(s, k, question());
    if (c.claimed) return true;
    r.verdict = tol::Verdict::not_claimed;
    r.reasons.push_back(c.reason);
  } catch (const std::exception& e) {
    // A predicate that fails is a defect of the kernel: the case is its ERROR, not a refusal.
    r.verdict = tol::Verdict::error;
    r.reasons.push_back(fmt::format("the claim could not be decided (can_implement): {}", e.what()));
  }
  return false;
}

Drawn drawn_case(Session& s, const Implementation& k, const std::string& file, const std::string& name) {
  if (s.case_regex && !std::regex_search(fresh_key(name), *s.case_regex)) return Drawn::not_selected;
  if (!s.in_shard(kFresh, name)) return Drawn::not_selected;
  if (auto kept = s.kept_drawn(k, {kFresh, file, name})) {
    s.record(k, std::move(*kept));
    return Drawn::kept;
  }
  return Drawn::run;
}

}  // namespace mla::certify
