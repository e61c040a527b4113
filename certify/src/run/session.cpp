#include "run/session.hpp"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/junit.hpp"

namespace mla::certify {

reports::CaseResult Session::base_result(const CaseRef& ref) const {
  reports::CaseResult r;
  r.family = ref.family;
  r.file = ref.file;
  r.name = ref.name;
  return r;
}

std::optional<reports::CaseResult> Session::kept(const Implementation& k, const CaseRef& ref) {
  auto r = resume.previous(report(k), ref, catalog);
  if (r) ++resume.kept;
  return r;
}

std::optional<reports::CaseResult> Session::kept_drawn(const Implementation& k, const CaseRef& ref,
                                                      const std::vector<int32_t>* seqlens) {
  auto r = resume.previous(report(k), ref, catalog);
  if (!r) return r;
  // The name says the kind and the shape; the lengths are drawn too. Belt and braces: the same
  // seed draws the same lengths, but a row that says otherwise is run again, never believed.
  if (seqlens && r->shape.is_object() && r->shape.contains("cache_seqlens") &&
      r->shape.at("cache_seqlens") != nlohmann::json(*seqlens)) {
    return std::nullopt;
  }
  ++resume.kept;
  return r;
}

reports::Certificate Session::with_outside() const {
  reports::Certificate c = cert;
  std::size_t n = 0;
  for (std::size_t i = 0; i < outside.size() && i < c.kernels.size(); ++i) {
    for (const auto& r : outside[i]) c.kernels[i].cases.push_back(r);
    n += outside[i].size();
  }
  if (n > 0) {
    c.notes.push_back(fmt::format("{} result{} of cases outside this run's selection kept from the previous "
                                  "certificate (--resume with a narrower --case or --family)",
                                  n, n == 1 ? "" : "s"));
  }
  return c;
}

void write_outputs(const reports::Certificate& c, const std::filesystem::path& dir) {
  // The three change together: a reader never finds the JSON of one state beside the Markdown
  // or JUnit of another (a CI that reads only the JUnit must see the verdict the JSON states).
  reports::write_files_together({{dir / kJsonName, reports::to_json(c).dump(1) + "\n"},
                                 {dir / kMarkdownName, reports::to_markdown(c)},
                                 {dir / kJunitName, to_junit(c)}});
}

void Session::save() {
  try {
    write_outputs(with_outside(), options.out);
  } catch (const std::exception& e) {
    // The run is worth finishing (the summary still reports it); say loudly that the file
    // on disk is behind. A full disk may also fail the allocation of the text: still the host's.
    progress << "error: " << e.what() << "\n";
    if (!save_failed) save_error = e.what();
    save_failed = true;
  }
}

void update_notes(reports::Certificate& cert) {
  for (auto& k : cert.kernels) {
    std::map<std::string, int> handled;
    std::vector<const reports::CaseResult*> would_fail;
    for (const auto& r : k.cases) {
      if (r.verdict != tol::Verdict::not_claimed || !r.probe || r.reasons.empty()) continue;
      // Grouped by the refusal's words (the row's first reason), counted by the typed verdict.
      if (*r.probe == tol::Verdict::pass) ++handled[r.reasons[0]];
      if (*r.probe == tol::Verdict::fail) would_fail.push_back(&r);
    }
    k.notes.clear();
    if (!handled.empty()) {
      std::vector<std::string> parts;
      for (const auto& [why, n] : handled) parts.push_back(fmt::format("\"{}\" ({} case{})", why, n, n == 1 ? "" : "s"));
      k.notes.push_back(fmt::format("handles shapes it does not claim (informational runs pass): {}", fmt::join(parts, ", ")));
    }
    // Not part of any verdict, but a user must not have to find it in the rows: an unclaimed
    // shape it would get wrong is one a caller must keep away from it.
    if (!would_fail.empty()) {
      std::vector<std::string> names;
      for (const auto* r : would_fail) names.push_back(r->family + "/" + r->name);
      k.notes.push_back(fmt::format("would FAIL {} shape{} it does not claim (informational runs): {}", would_fail.size(),
                                    would_fail.size() == 1 ? "" : "s", fmt::join(names, ", ")));
    }
  }
}

}  // namespace mla::certify
