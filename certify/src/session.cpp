#include "session.hpp"

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

void Session::save() {
  try {
    reports::write_certificate(cert, options.out);
    reports::write_file_atomically(options.out / kJunitName, to_junit(cert));
  } catch (const Error& e) {
    // The run is worth finishing (the summary still reports it); say loudly that the file
    // on disk is behind.
    progress << "error: " << e.what() << "\n";
    save_failed = true;
  }
}

void update_notes(reports::Certificate& cert) {
  for (auto& k : cert.kernels) {
    std::map<std::string, int> handled;
    for (const auto& r : k.cases) {
      if (r.verdict == tol::Verdict::unsupported && r.reasons.size() >= 2 && r.reasons[1] == kProbePass) {
        std::string_view why = r.reasons[0];
        if (why.substr(0, kNotClaimed.size()) == kNotClaimed) why.remove_prefix(kNotClaimed.size());
        ++handled[std::string(why)];
      }
    }
    k.notes.clear();
    if (handled.empty()) continue;
    std::vector<std::string> parts;
    for (const auto& [why, n] : handled) parts.push_back(fmt::format("\"{}\" ({} case{})", why, n, n == 1 ? "" : "s"));
    k.notes.push_back(fmt::format("handles shapes it does not claim (informational runs pass): {}", fmt::join(parts, ", ")));
  }
}

}  // namespace mla::certify
