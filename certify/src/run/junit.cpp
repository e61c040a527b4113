#include "mla/certify/junit.hpp"

#include <fmt/format.h>

#include "mla/reports/coverage.hpp"

namespace mla::certify {

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters other than tab, newline and carriage return.
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') out += '?';
        else out += static_cast<char>(ch);
    }
  }
  return out;
}

std::string to_junit(const reports::Certificate& c) {
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  for (const auto& k : c.kernels) {
    const auto n = reports::count(k);
    tests += n.total();
    failures += n.fail;
    errors += n.error + n.host_error;
    skipped += n.skipped + n.unsupported + n.not_claimed;
  }
  // A run that did not finish fails in every CI that reads this file: one failing test case
  // that says so, whatever the recorded cases say.
  const bool incomplete = reports::overall(c) == reports::Overall::incomplete;
  // Nothing judged is no pass either: one failing test case says so.
  const bool not_judged = reports::overall(c) == reports::Overall::not_judged;
  if (incomplete || not_judged) ++tests, ++failures;
  // A shard's file is named for its shard, so a CI that collects several never reads one as the
  // whole selection.
  const std::string suite = c.shard && c.shard->part() ? fmt::format("mla-certify shard {} of {}", c.shard->index, c.shard->count)
                                                       : std::string("mla-certify");
  x += fmt::format("<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
                   "time=\"{:.3f}\">\n",
                   xml_escape(suite), tests, failures, errors, skipped, c.wall_seconds);
  for (const auto& k : c.kernels) {
    const auto n = reports::count(k);
    double time = 0;
    for (const auto& r : k.cases) time += r.run_seconds.value_or(0.0);
    x += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6f}\" "
                     "timestamp=\"{}\" hostname=\"{}\">\n",
                     xml_escape(k.name), n.total(), n.fail, n.error + n.host_error, n.skipped + n.unsupported + n.not_claimed, time,
                     xml_escape(c.started_utc), xml_escape(c.machine.hostname));
    x += "    <properties>\n";
    auto prop = [&](const std::string& name, const std::string& value) {
      x += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", xml_escape(name), xml_escape(value));
    };
    prop("version", k.version);
    prop("backend", k.backend);
    prop("out_dtype", k.out_dtype);
    if (!k.origin.is_null()) prop("origin", k.origin.dump());
    prop("catalog_manifest_sha256", c.manifest_sha256);
    prop("git_commit", c.machine.git_commit.value_or("unknown"));
    // The device the verdicts hold for: the GPUs when there are any, else the CPU.
    prop("device", c.machine.gpus.empty() ? c.machine.cpu_model : fmt::format("{}", fmt::join(c.machine.gpus, "; ")));
    prop("driver", c.machine.driver.value_or("n/a"));
    prop("verdict", reports::headline(c, k));
    if (c.shard && c.shard->part()) prop("shard", fmt::format("{} of {}", c.shard->index, c.shard->count));
    for (const auto& note : k.notes) prop("note", note);
    x += "    </properties>\n";
    for (const auto& r : k.cases) {
      x += fmt::format("    <testcase classname=\"{}\" name=\"{}/{}\" time=\"{:.6f}\"", xml_escape(k.name),
                       xml_escape(r.family), xml_escape(r.name), r.run_seconds.value_or(0.0));
      std::string body;
      for (const auto& why : r.reasons) body += why + "\n";
      const std::string first = r.reasons.empty() ? std::string() : r.reasons.front();
      switch (r.verdict) {
        case tol::Verdict::pass: x += "/>\n"; continue;
        case tol::Verdict::fail:
          x += fmt::format(">\n      <failure message=\"{}\" type=\"FAIL\">{}</failure>\n", xml_escape(first),
                           xml_escape(body));
          break;
        case tol::Verdict::error:
          x += fmt::format(">\n      <error message=\"{}\" type=\"ERROR\">{}</error>\n", xml_escape(first),
                           xml_escape(body));
          break;
        case tol::Verdict::unsupported:
          x += fmt::format(">\n      <skipped message=\"UNSUPPORTED: {}\"/>\n", xml_escape(first));
          if (r.reasons.size() > 1) x += fmt::format("      <system-out>{}</system-out>\n", xml_escape(body));
          break;
        case tol::Verdict::skipped:
          x += fmt::format(">\n      <skipped message=\"SKIPPED: {}\"/>\n", xml_escape(first));
          break;
        case tol::Verdict::not_claimed:
          x += fmt::format(">\n      <skipped message=\"NOT_CLAIMED: {}\"/>\n", xml_escape(first));
          if (r.reasons.size() > 1) x += fmt::format("      <system-out>{}</system-out>\n", xml_escape(body));
          break;
        case tol::Verdict::host_error:
          x += fmt::format(">\n      <error message=\"HOST_ERROR: {}\" type=\"HOST_ERROR\">{}</error>\n",
                           xml_escape(first), xml_escape(body));
          break;
      }
      x += "    </testcase>\n";
    }
    x += "  </testsuite>\n";
  }
  if (incomplete) {
    std::size_t recorded = 0;
    for (const auto& k : c.kernels) recorded += k.cases.size();
    const std::string why =
        c.shard && !c.shard->missing.empty()
            ? fmt::format("merged without shard {} of {}: its cases were never certified", fmt::join(c.shard->missing, ", "),
                          c.shard->count)
        : c.complete ? "some cases hit a HOST_ERROR and were not certified; --resume runs them again"
                   : fmt::format("the run did not finish ({} results recorded); --resume finishes it", recorded);
    x += "  <testsuite name=\"mla-certify\" tests=\"1\" failures=\"1\" errors=\"0\" skipped=\"0\">\n";
    x += fmt::format("    <testcase classname=\"mla-certify\" name=\"run complete\">\n      <failure message=\"INCOMPLETE: "
                     "{}\" type=\"INCOMPLETE\"/>\n    </testcase>\n",
                     xml_escape(why));
    x += "  </testsuite>\n";
  }
  if (not_judged) {
    x += "  <testsuite name=\"mla-certify\" tests=\"1\" failures=\"1\" errors=\"0\" skipped=\"0\">\n";
    x += fmt::format("    <testcase classname=\"mla-certify\" name=\"something judged\">\n      <failure message=\"NOT_JUDGED: "
                     "{}\" type=\"NOT_JUDGED\"/>\n    </testcase>\n",
                     xml_escape(reports::not_judged_reason(c)));
    x += "  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return x;
}

}  // namespace mla::certify
