// The cache-append kind: a plug-in's append entry point (ABI 1.1) on cases built from the
// catalog's append families (layer cases: their configuration and boundary steps), then on cases
// drawn inside its claims. Judged by judge_append (judge/append.hpp) against the fp64 append
// oracle (ref/append.hpp); the cases and the arena audit are append_case.cpp and append_arena.cpp.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "kinds/kinds.hpp"
#include "mla/certify/append_case.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

// The families the append kind certifies, in catalog order.
std::vector<const golden::Family*> append_families() {
  std::vector<const golden::Family*> f;
  for (const auto& fam : golden::families()) {
    if (fam.certify == append_kind().name()) f.push_back(&fam);
  }
  return f;
}

class AppendKind final : public CaseKind {
 public:
  std::string_view name() const override { return "append"; }
  std::string_view families_are() const override { return "plug-in appends"; }
  std::optional<golden::FamilyKind> loads() const override { return golden::FamilyKind::layer; }
  bool common() const override { return false; }
  std::vector<std::string> drawn_files() const override { return {kFreshAppendFile}; }
  bool serves(const Implementation& k) const override { return k.external && k.append_formats != 0; }

  void plan(Session& s, const golden::Family& fam, const std::vector<std::string>& files,
            std::vector<std::string>& unused) const override {
    // The cases are built when certified (per plug-in, from what it claims); here only what a
    // run without an appender leaves unused.
    if (std::any_of(s.implementations.begin(), s.implementations.end(), [this](const Implementation& k) { return serves(k); })) {
      return;
    }
    for (const auto& f : files) {
      unused.push_back(fmt::format("{} (family {}: certified for plug-ins with an append entry point; none is "
                                   "selected)",
                                   f, fam.name));
    }
  }

  bool has_cases(const Session& s) const override {
    const auto fams = append_families();
    return std::any_of(fams.begin(), fams.end(), [&](const golden::Family* f) { return any_append_case_selected(s, *f); });
  }

  std::string why_none(const Session& s) const override {
    for (const auto* f : append_families()) {
      if (appends_selected(s, *f)) {
        return fmt::format("no selected plug-in has an append entry point for the {} cases", f->certified_as);
      }
    }
    return {};
  }

  // Append cases exist only once built per plug-in: each is checked against the shard as it is
  // built (append_case.cpp).
  void cut_to_shard(Session&) const override {}

  std::function<bool(const reports::CaseResult&)> reruns(const Session& s) const override {
    std::set<std::string> rerun;
    for (const auto* f : append_families()) {
      if (any_append_case_selected(s, *f)) rerun.insert(f->certified_as);
    }
    return [rerun = std::move(rerun)](const reports::CaseResult& r) { return rerun.count(r.family) > 0; };
  }

  bool certify_stored(Session& s) const override {
    for (const auto* f : append_families()) {
      if (stop_requested(s)) return false;
      certify_appends(s, *f);
    }
    return !stop_requested(s);
  }

  void certify_fresh(Session& s, const Implementation& k, uint64_t seed) const override {
    certify_fresh_appends(s, k, seed);
  }
};

}  // namespace

const CaseKind& append_kind() {
  static const AppendKind kind;
  return kind;
}

}  // namespace mla::certify
