// The decode kind: every implementation's paged decode attention (core/kernel.hpp's
// AttentionImpl, the C ABI's decode entry, the Python door's `decode`) on every case of the
// catalog's decode families (golden attention cases), then on cases drawn inside its claims.
// Judged by judge_attention (judge/attention.hpp) against the fp64 oracle (ref/attention.hpp).
#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>

#include "kinds/kinds.hpp"
#include "mla/golden/golden.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;

void progress_line(Session& s, std::size_t i, std::size_t n, const CaseRef& ref, double secs) {
  std::string verdicts;
  for (const auto& k : s.implementations) {
    if (!k.decodes()) continue;
    const auto& cases = s.report(k).cases;
    if (cases.empty()) continue;
    verdicts += fmt::format(" {}={}", k.info.name, tol::to_string(cases.back().verdict));
  }
  s.progress << fmt::format("[{}/{}] {}/{} {:.2f}s:{}\n", i, n, ref.family, ref.name, secs, verdicts);
}

class DecodeKind final : public CaseKind {
 public:
  std::string_view name() const override { return "decode"; }
  std::string_view families_are() const override { return "decode families"; }
  std::optional<golden::FamilyKind> loads() const override { return golden::FamilyKind::attention; }
  bool common() const override { return true; }
  std::vector<std::string> drawn_files() const override { return {kFresh}; }
  bool serves(const Implementation& k) const override { return k.decodes(); }

  void plan(Session& s, const golden::Family& fam, const std::vector<std::string>& files,
            std::vector<std::string>&) const override {
    if (files.empty()) {
      const auto note = fmt::format("family {} is not in the catalog (no file of MANIFEST.sha256 says family {})",
                                    fam.certified_as, fam.name);
      if (!s.options.families.empty()) throw UsageError(note);
      s.cert.notes.push_back(note);
      s.progress << "warning: " << note << "\n";
      return;
    }
    const std::string& family = fam.certified_as;
    for (const auto& file : files) {
      for (const auto& name : golden::read_file_info(s.catalog.file(file)).cases) {
        if (s.case_regex && !std::regex_search(family + "/" + name, *s.case_regex)) continue;
        s.attention_cases.push_back({family, file, name});
      }
    }
  }

  bool has_cases(const Session& s) const override {
    return !s.attention_cases.empty() && std::any_of(s.implementations.begin(), s.implementations.end(),
                                                     [this](const Implementation& k) { return serves(k); });
  }
  std::string why_none(const Session& s) const override {
    return s.attention_cases.empty() ? "no decode case" : "no selected implementation has the decode entry point";
  }

  void cut_to_shard(Session& s) const override {
    const auto before = s.attention_cases.size();
    std::erase_if(s.attention_cases, [&](const CaseRef& r) { return !s.in_shard(r.family, r.name); });
    s.progress << fmt::format("mla certify: shard {} of {}: {} of {} attention cases\n", s.options.shard_index,
                              s.options.shard_count, s.attention_cases.size(), before);
  }

  std::function<bool(const reports::CaseResult&)> reruns(const Session& s) const override {
    // A stored case and its fresh twin (kernels from outside) are this run's when it is selected.
    std::set<std::string> selected;
    for (const auto& ref : s.attention_cases) selected.insert(ref.key()), selected.insert(ref.key() + kTwinSuffix);
    return [selected = std::move(selected)](const reports::CaseResult& r) {
      return selected.count(r.file + "/" + r.name) > 0;
    };
  }

  bool certify_stored(Session& s) const override {
    const auto decoders = std::count_if(s.implementations.begin(), s.implementations.end(),
                                        [](const Implementation& k) { return k.decodes(); });
    if (decoders == 0) return true;  // only kernels of other kinds selected: no row to write
    s.progress << fmt::format("mla certify: {} implementations x {} cases from {}\n", decoders,
                              s.attention_cases.size(), s.cert.goldens_dir);
    ask_catalog_claims(s);
    for (std::size_t i = 0; i < s.attention_cases.size(); ++i) {
      if (stop_requested(s)) return false;
      const auto t_case = Clock::now();
      certify_attention_case(s, s.attention_cases[i], i);
      update_notes(s.cert);
      s.cert.wall_seconds = seconds_since(s.started);
      s.save();
      progress_line(s, i + 1, s.attention_cases.size(), s.attention_cases[i], seconds_since(t_case));
    }
    return true;
  }

  void certify_fresh(Session& s, const Implementation& k, uint64_t seed) const override {
    certify_fresh_decode(s, k, seed);
  }
};

}  // namespace

const CaseKind& decode_kind() {
  static const DecodeKind kind;
  return kind;
}

}  // namespace mla::certify
